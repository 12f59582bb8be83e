package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"

	"github.com/BurntSushi/toml"
)

// Load reads, decodes and validates the config file at path. It returns
// either a valid *Config (with Path set) or an *Errors listing every problem
// found, one per line as "PATH:LINE: KEY: what is wrong".
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Errors{{File: path, Msg: "cannot read config: " + err.Error()}}
	}
	return Parse(path, data)
}

// Parse decodes and validates data as the config file at path; path names
// the file in problems and anchors the relative paths the config names (TLS
// files, rollout.state_file). Decoding is strict: unknown keys and values of
// the wrong type are problems. Omitted keys take the defaults of Defaults,
// DefaultRoute, DefaultReplica and DefaultClass; a key given explicitly,
// even as 0, "" or false, keeps its value.
//
// A TOML syntax error stops parsing, so it is the only problem reported;
// otherwise every problem is reported, in line order.
func Parse(path string, data []byte) (*Config, error) {
	var doc map[string]any
	if _, err := toml.Decode(string(data), &doc); err != nil {
		return nil, syntaxError(path, data, err)
	}
	d := &decoder{file: path, lines: indexLines(data), bad: map[string]bool{}, defined: map[string]bool{}}
	cfg := Defaults()
	cfg.Path = path
	d.decodeStruct(nil, doc, reflect.ValueOf(&cfg).Elem())
	uf := loadUsersFile(d, &cfg)
	if uf != nil {
		// Known to every check (an admin or auth_user may be one of
		// them); their own problems name their file (validator.users).
		uf.from = len(cfg.Users)
		cfg.Users = append(cfg.Users, uf.users...)
	}
	validate(d, &cfg, uf)
	probs := d.probs
	sort.SliceStable(probs, func(i, j int) bool { return probs[i].Line < probs[j].Line })
	if uf != nil && len(uf.probs) > 0 {
		sort.SliceStable(uf.probs, func(i, j int) bool { return uf.probs[i].Line < uf.probs[j].Line })
		probs = append(probs, uf.probs...)
	}
	if len(probs) > 0 {
		return nil, &probs
	}
	return &cfg, nil
}

// usersFile is the decoded users_file: its [[users]] entries and the
// problems found in it (reported with its own name and lines).
type usersFile struct {
	*decoder
	users []User
	from  int // the index of its first user in Config.Users
}

// loadUsersFile reads cfg.UsersFile, if set, resolving it against the
// config file's directory (in place). nil when there is none, or when it
// cannot be read (a problem of the main file's users_file key).
func loadUsersFile(d *decoder, cfg *Config) *usersFile {
	if cfg.UsersFile == "" {
		return nil
	}
	p := keys("users_file")
	if cfg.Path != "" && !filepath.IsAbs(cfg.UsersFile) {
		cfg.UsersFile = filepath.Join(filepath.Dir(cfg.Path), cfg.UsersFile)
	}
	data, err := os.ReadFile(cfg.UsersFile)
	if err != nil {
		d.problem(p, "cannot read the users file: %v", err)
		return nil
	}
	uf := &usersFile{decoder: &decoder{file: cfg.UsersFile, lines: indexLines(data), bad: map[string]bool{}, defined: map[string]bool{}}}
	var doc map[string]any
	if _, err := toml.Decode(string(data), &doc); err != nil {
		var se *Errors
		if errors.As(syntaxError(cfg.UsersFile, data, err), &se) {
			uf.probs = append(uf.probs, *se...)
		}
		return uf
	}
	var only struct {
		Users []User `toml:"users"`
	}
	uf.decodeStruct(nil, doc, reflect.ValueOf(&only).Elem())
	uf.users = only.Users
	return uf
}

func syntaxError(path string, data []byte, err error) error {
	var pe toml.ParseError
	if !errors.As(err, &pe) {
		return &Errors{{File: path, Line: 1, Key: "toml", Msg: "invalid TOML: " + err.Error()}}
	}
	line := max(pe.Position.Line, 1)
	return &Errors{{
		File: path,
		Line: line,
		Key:  syntaxKey(data, line, pe.LastKey),
		Msg:  "invalid TOML: " + pe.Message,
	}}
}
