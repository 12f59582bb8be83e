package compat

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const installHint = "run scripts/install-deps.sh (as root) to install the client drivers"

// missing skips t because a client runtime is not installed, or fails it when
// CI is set: there, every client must run.
func missing(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is missing; %s. CI is set, so this is a failure, not a skip.", what, installHint)
	}
	t.Skipf("%s is missing; %s", what, installHint)
}

// baseEnv is our environment without any PG* variable that could redirect a
// client, with messages in English.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG") || strings.HasPrefix(kv, "COMPAT_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

// runProgram runs a client program to completion with tg's environment and
// returns its standard output. A program that cannot start, exits non-zero
// or overruns ctx fails the test with its output.
func runProgram(t *testing.T, ctx context.Context, tg target, argv ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(baseEnv(), tg.env()...)
	cmd.WaitDelay = 5 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	begin := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%q did not finish in time (%v)\n--- stdout:\n%s\n--- stderr:\n%s", argv, ctx.Err(), out.Bytes(), errb.Bytes())
	}
	if err != nil {
		t.Fatalf("%q: %v\n--- stdout:\n%s\n--- stderr:\n%s", argv, err, out.Bytes(), errb.Bytes())
	}
	t.Logf("%s ran in %v", filepath.Base(argv[len(argv)-1]), time.Since(begin).Round(time.Millisecond))
	if errb.Len() > 0 {
		t.Logf("%q stderr:\n%s", argv, errb.Bytes())
	}
	return out.Bytes()
}

// python returns an interpreter that can import module: Debian's
// /usr/bin/python3 first (where python3-psycopg2 and python3-psycopg
// install), then python3 on PATH.
func python(module string) (string, bool) {
	candidates := []string{"/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, p)
	}
	for _, py := range candidates {
		if exec.Command(py, "-c", "import "+module).Run() == nil {
			return py, true
		}
	}
	return "", false
}

// pythonClient runs script with a Python that has module (the Debian package
// pkg provides it).
func pythonClient(name, module, pkg, script string) func(*testing.T, context.Context) mixer {
	return func(t *testing.T, _ context.Context) mixer {
		t.Helper()
		py, ok := python(module)
		if !ok {
			missing(t, name+" (Debian "+pkg+" for /usr/bin/python3)")
		}
		return func(t *testing.T, ctx context.Context, tg target) []byte {
			t.Helper()
			return runProgram(t, ctx, tg, py, script)
		}
	}
}

// nodeClient runs node/mix.js with node-postgres from node/node_modules.
func nodeClient(t *testing.T, _ context.Context) mixer {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		missing(t, "node (Debian nodejs)")
	}
	if _, err := os.Stat("node/node_modules/pg/package.json"); err != nil {
		missing(t, "node-postgres (npm ci in test/compat/node)")
	}
	return func(t *testing.T, ctx context.Context, tg target) []byte {
		t.Helper()
		return runProgram(t, ctx, tg, node, "node/mix.js")
	}
}

// pgJDBC as Debian's libpostgresql-jdbc-java installs it (SCRAM is shaded in).
const jdbcJar = "/usr/share/java/postgresql.jar"

// jdbcClient compiles jdbc/Mix.java into a temporary directory and runs it.
func jdbcClient(t *testing.T, ctx context.Context) mixer {
	t.Helper()
	javac, err1 := exec.LookPath("javac")
	java, err2 := exec.LookPath("java")
	if err := errors.Join(err1, err2); err != nil {
		missing(t, "a JDK (Debian default-jdk-headless)")
	}
	if _, err := os.Stat(jdbcJar); err != nil {
		missing(t, "pgJDBC "+jdbcJar+" (Debian libpostgresql-jdbc-java)")
	}
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, javac, "-d", dir, "-cp", jdbcJar, "jdbc/Mix.java")
	cmd.Env = baseEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("javac jdbc/Mix.java: %v\n%s", err, out)
	}
	return func(t *testing.T, ctx context.Context, tg target) []byte {
		t.Helper()
		return runProgram(t, ctx, tg, java, "-cp", dir+string(os.PathListSeparator)+jdbcJar, "Mix")
	}
}
