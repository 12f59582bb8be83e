package config

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// Kinds of [[users]] password, as PasswordKind reports them.
const (
	PasswordPlaintext   = "plaintext"
	PasswordSCRAMSHA256 = "scram-sha-256"
	PasswordMD5         = "md5"
)

const scramPrefix = "SCRAM-SHA-256$"

// PasswordKind classifies a [[users]] password the way PostgreSQL classifies
// pg_authid.rolpassword: a string starting with "SCRAM-SHA-256$" is a SCRAM
// verifier (Load has checked that it parses), "md5" followed by exactly 32
// hexadecimal digits is an MD5 hash, anything else is plaintext.
func PasswordKind(password string) string {
	switch {
	case strings.HasPrefix(password, scramPrefix):
		return PasswordSCRAMSHA256
	case isMD5Hash(password):
		return PasswordMD5
	}
	return PasswordPlaintext
}

// PasswordKind is the kind of u.Password.
func (u *User) PasswordKind() string { return PasswordKind(u.Password) }

func isMD5Hash(s string) bool {
	if len(s) != 35 || !strings.HasPrefix(s, "md5") {
		return false
	}
	for _, c := range s[3:] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// SCRAMVerifier is a parsed SCRAM-SHA-256 verifier, the form PostgreSQL stores:
//
//	SCRAM-SHA-256$<iterations>:<base64 salt>$<base64 StoredKey>:<base64 ServerKey>
type SCRAMVerifier struct {
	Iterations int
	Salt       []byte
	StoredKey  []byte // 32 bytes
	ServerKey  []byte // 32 bytes
}

// ParseSCRAMVerifier parses a SCRAM-SHA-256 verifier. The error says which
// part is wrong and never repeats the secret parts.
func ParseSCRAMVerifier(s string) (SCRAMVerifier, error) {
	var v SCRAMVerifier
	rest, ok := strings.CutPrefix(s, scramPrefix)
	if !ok {
		return v, fmt.Errorf("does not start with %q", scramPrefix)
	}
	iterSalt, keys, ok := strings.Cut(rest, "$")
	if !ok {
		return v, fmt.Errorf("want SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>: missing \"$\" before the keys")
	}
	iter, salt, ok := strings.Cut(iterSalt, ":")
	if !ok {
		return v, fmt.Errorf("want <iterations>:<salt> after %q", scramPrefix)
	}
	n, err := strconv.Atoi(iter)
	if err != nil || n < 1 {
		return v, fmt.Errorf("iteration count %q is not a positive integer", iter)
	}
	v.Iterations = n
	if v.Salt, err = base64.StdEncoding.DecodeString(salt); err != nil || len(v.Salt) == 0 {
		return v, fmt.Errorf("salt is not non-empty base64")
	}
	stored, server, ok := strings.Cut(keys, ":")
	if !ok {
		return v, fmt.Errorf("want <StoredKey>:<ServerKey> after the salt")
	}
	if v.StoredKey, err = base64.StdEncoding.DecodeString(stored); err != nil || len(v.StoredKey) != 32 {
		return v, fmt.Errorf("StoredKey is not 32 bytes of base64")
	}
	if v.ServerKey, err = base64.StdEncoding.DecodeString(server); err != nil || len(v.ServerKey) != 32 {
		return v, fmt.Errorf("ServerKey is not 32 bytes of base64")
	}
	return v, nil
}
