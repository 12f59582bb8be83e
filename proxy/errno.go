package proxy

import "syscall"

// errTooManyFiles is the accept error of a process out of descriptors; the
// listener backs off instead of exiting.
var errTooManyFiles = syscall.EMFILE
