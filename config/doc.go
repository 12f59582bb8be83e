// Package config owns kineticd's configuration: the TOML schema of SPEC §2,
// its defaults, strict decoding and validation, and the running
// configuration's holder.
//
// Load (or Parse) returns either a valid *Config or an *Errors listing every
// problem, each rendered "PATH:LINE: KEY: what is wrong" with KEY a dotted
// key path carrying array indices (routes[0].replicas[1].address). Unknown
// keys, wrong types, out-of-range numbers, unknown enum words and
// cross-reference mistakes are all problems; nothing is silently ignored.
// docs/configuration.md is the user-facing reference and records the choices
// made where the SPEC is silent.
//
// Concurrency: a *Config is immutable once Load returns it; nothing in the
// program may modify it, so it can be shared freely. A Holder is safe for
// concurrent use: Load is a lock-free atomic read, Reload builds a new Config
// and swaps it in whole, or leaves the running one in place when the file is
// invalid. Load and Reload block only on reading the config file (and the
// TLS files it names); the package starts no goroutines and holds no
// package-level mutable state.
package config
