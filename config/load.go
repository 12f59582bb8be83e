package config

import (
	"errors"
	"os"
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
	validate(d, &cfg)
	if len(d.probs) > 0 {
		sort.SliceStable(d.probs, func(i, j int) bool { return d.probs[i].Line < d.probs[j].Line })
		return nil, &d.probs
	}
	return &cfg, nil
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
