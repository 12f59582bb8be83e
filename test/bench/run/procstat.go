package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// procUsage is what /proc says about a process tree at one moment.
type procUsage struct {
	ticks  int64 // utime+stime of every live member, plus cutime+cstime (children they reaped)
	rssKiB int64 // VmRSS summed over the members
	pssKiB int64 // proportional set size summed: shared pages count once in all
	procs  int
}

// treeUsage sums CPU ticks and RSS over root and all its descendants. CPU of
// a descendant that exited and was reaped inside the tree is kept: the
// kernel adds it to its parent's cutime/cstime, which is counted too, so the
// pgpool children that come and go are not lost.
func treeUsage(root int) (procUsage, error) {
	pids, ticks, err := tree(root)
	if err != nil {
		return procUsage{}, err
	}
	u := procUsage{ticks: ticks, procs: len(pids)}
	for _, pid := range pids {
		if rss, err := readRSS(pid); err == nil {
			u.rssKiB += rss
		}
		if pss, err := readPSS(pid); err == nil {
			u.pssKiB += pss
		}
	}
	return u, nil
}

// tree returns root and its descendants, and their CPU ticks summed as
// treeUsage counts them.
func tree(root int) (pids []int, ticks int64, err error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, 0, err
	}
	type stat struct {
		ppid  int
		ticks int64
	}
	stats := map[int]stat{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, ticks, err := readStat(pid)
		if err != nil {
			continue // exited meanwhile
		}
		stats[pid] = stat{ppid, ticks}
	}
	if _, ok := stats[root]; !ok {
		return nil, 0, fmt.Errorf("process %d is gone", root)
	}
	children := map[int][]int{}
	for pid, s := range stats {
		children[s.ppid] = append(children[s.ppid], pid)
	}
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		pids = append(pids, pid)
		ticks += stats[pid].ticks
		queue = append(queue, children[pid]...)
	}
	return pids, ticks, nil
}

// switches sums over pids the read(2) and write(2) calls (/proc/PID/io
// syscr, syscw: PostgreSQL's recv and send on sockets are not counted
// there, Go's reads and writes are) and the context switches, voluntary
// and not, of every thread (/proc/PID/task/TID/status). A process that
// exits takes its counts with it: sample while the processes of interest
// run.
func switches(pids []int) (syscalls, ctxsw int64) {
	for _, pid := range pids {
		dir := filepath.Join("/proc", strconv.Itoa(pid))
		if b, err := os.ReadFile(filepath.Join(dir, "io")); err == nil {
			syscalls += field(string(b), "syscr:") + field(string(b), "syscw:")
		}
		tasks, _ := os.ReadDir(filepath.Join(dir, "task"))
		for _, t := range tasks {
			if b, err := os.ReadFile(filepath.Join(dir, "task", t.Name(), "status")); err == nil {
				ctxsw += field(string(b), "voluntary_ctxt_switches:") + field(string(b), "nonvoluntary_ctxt_switches:")
			}
		}
	}
	return syscalls, ctxsw
}

// field returns the number after key at the start of a line of text, 0
// when there is none.
func field(text, key string) int64 {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			return n
		}
	}
	return 0
}

// machineTicks reads the first line of /proc/stat: the ticks every CPU
// spent busy (user, nice, system, irq, softirq), stolen by the hypervisor,
// and in all.
func machineTicks() (busy, steal, total int64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, 0, errors.New("malformed /proc/stat")
	}
	var n [8]int64 // user nice system idle iowait irq softirq steal
	for i := range n {
		if n[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return 0, 0, 0, err
		}
		total += n[i]
	}
	return n[0] + n[1] + n[2] + n[5] + n[6], n[7], total, nil
}

// readStat returns the parent pid and utime+stime+cutime+cstime of pid, in
// clock ticks, from /proc/PID/stat.
func readStat(pid int) (ppid int, ticks int64, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold anything.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime..cstime fields 14..17.
	if len(f) < 15 {
		return 0, 0, errors.New("short stat")
	}
	if ppid, err = strconv.Atoi(f[1]); err != nil {
		return 0, 0, err
	}
	for _, s := range f[11:15] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, 0, err
		}
		ticks += n
	}
	return ppid, ticks, nil
}

// readRSS returns VmRSS of pid in KiB (0 for a kernel thread or zombie).
func readRSS(pid int) (int64, error) { return procKiB(pid, "status", "VmRSS:") }

// readPSS returns the proportional set size of pid in KiB from
// /proc/PID/smaps_rollup: each shared page divided among its sharers, so a
// sum over pgpool's children counts its shared memory once.
func readPSS(pid int) (int64, error) { return procKiB(pid, "smaps_rollup", "Pss:") }

// procKiB returns the number after key in /proc/PID/file (a "Key: N kB"
// line), 0 when there is no such line.
func procKiB(pid int, file, key string) (int64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), file))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, nil
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times: getconf CLK_TCK,
// or 100 (every Linux architecture Go runs on) when getconf is missing.
func clockTicks() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return 100
}
