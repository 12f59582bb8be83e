package differential

import (
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestGenerateDeterministic: a seed names one sequence.
func TestGenerateDeterministic(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		a, b := Generate(seed, AllFeatures()), Generate(seed, AllFeatures())
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: two different sequences:\n%s\n%s", seed, a, b)
		}
	}
}

// TestGenerateShapes: every generated sequence is something a client may
// send (no Query while an extended batch is open, the last batch synced),
// and over many seeds every feature shows up.
func TestGenerateShapes(t *testing.T) {
	seen := map[string]int{}
	for seed := uint64(0); seed < 3000; seed++ {
		s := Generate(seed, AllFeatures())
		open := false
		for i, u := range s.Units {
			if len(u.Msgs) == 0 {
				t.Fatalf("seed %d unit %d: empty", seed, i)
			}
			if _, q := u.Msgs[0].(*pgproto3.Query); q && open {
				t.Fatalf("seed %d unit %d: Query while a batch is open:\n%s", seed, i, s)
			}
			for _, m := range u.Msgs {
				switch m := m.(type) {
				case *pgproto3.Sync:
					open = false
				case *pgproto3.Query:
					seen["Query"]++
					if strings.Contains(m.String, "SAVEPOINT") {
						seen["savepoint"]++
					}
					if strings.Contains(m.String, "COPY") {
						seen["copy"]++
					}
				case *pgproto3.Flush:
					seen["Flush"]++
				case *pgproto3.Execute:
					if m.MaxRows > 0 {
						seen["row limit"]++
					}
				case *pgproto3.Parse:
					if m.Name == "" {
						seen["unnamed Parse"]++
					} else {
						seen["named Parse"]++
					}
				default:
					open = true
				}
				if _, ok := m.(*pgproto3.Sync); !ok {
					if _, ok := m.(*pgproto3.Query); !ok {
						open = true
					}
				}
			}
			if len(u.Copy) > 0 {
				seen["copy in"]++
			}
			if u.Masked {
				seen["pg_kinetic"]++
			}
			if strings.Count(u.Kind(), "pipelined") > 0 {
				seen["pipeline"]++
			}
			if strings.HasPrefix(u.Note, "describe_exec: Bind") {
				seen["describe_exec"]++
			}
		}
		if open {
			t.Fatalf("seed %d: ends with an open batch:\n%s", seed, s)
		}
	}
	for _, w := range []string{"Query", "savepoint", "copy", "Flush", "row limit", "unnamed Parse", "named Parse", "copy in", "pg_kinetic", "pipeline", "describe_exec"} {
		if seen[w] == 0 {
			t.Errorf("no %s in 3000 sequences", w)
		}
	}
	t.Logf("%v", seen)
}

func TestParseFeatures(t *testing.T) {
	f, err := ParseFeatures("-flush,-kinetic")
	if err != nil || f["flush"] || f["kinetic"] || !f["tx"] {
		t.Fatalf("%v %v", f, err)
	}
	if f.String() != "-flush,-kinetic" {
		t.Fatal(f.String())
	}
	f, err = ParseFeatures("only:simple,tx")
	if err != nil || !f["simple"] || f["flush"] {
		t.Fatalf("%v %v", f, err)
	}
	if _, err := ParseFeatures("nosuch"); err == nil {
		t.Fatal("unknown feature accepted")
	}
}

func TestParseRef(t *testing.T) {
	r, ok, err := parseRef("123 keep=1,4 features=-flush # a comment")
	if err != nil || !ok || r.seed != 123 || !reflect.DeepEqual(r.keep, []int{1, 4}) || r.features["flush"] || r.comment != "a comment" {
		t.Fatalf("%+v %v %v", r, ok, err)
	}
	if r, ok, err := parseRef("5 keep=2 twice"); err != nil || !ok || !r.twice || r.sequence(AllFeatures()).Ref() != "5 keep=2 twice" {
		t.Fatalf("%+v %v %v", r, ok, err)
	}
	if _, ok, _ := parseRef("   # only a comment"); ok {
		t.Fatal("comment line parsed as a sequence")
	}
}
