package proxy

import (
	"github.com/xdg-go/scram"
	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/pool"
)

// Pass-through: a user whose secret is a SCRAM verifier (from [[users]]
// or auth_query) and who has no backend_password logs in to the servers
// with the ClientKey its clients prove (pool/scramkey.go). Every client
// that proves a verifier has the same ClientKey, so kineticd keeps one
// per verifier, in memory only (Server.scramSecrets): the first client
// to authenticate against the verifier sets it, and every pool of that
// user, on every server of every route, logs in with it, the health
// probes too. A key is only as good as its verifier: a changed verifier
// (a reload, a new auth_query answer) is another entry, with no key until
// a client proves it. An md5 hash without backend_password answers the
// servers' md5 requests itself.

// secretKey identifies a verifier in Server.scramSecrets.
type secretKey struct {
	salt              string
	iters             int
	storedKey, server string
}

func secretKeyOf(c scram.StoredCredentials) secretKey {
	return secretKey{salt: c.Salt, iters: c.Iters, storedKey: string(c.StoredKey), server: string(c.ServerKey)}
}

// scramSecret returns the pass-through secret of the verifier c, made on
// first use. storedCredentials calls it for every verifier a client
// authenticates against, so that scramAuth finds it and records the key.
func (s *Server) scramSecret(c scram.StoredCredentials) *pool.SCRAMSecret {
	k := secretKeyOf(c)
	if v, ok := s.scramSecrets.Load(k); ok {
		return v.(*pool.SCRAMSecret)
	}
	v, _ := s.scramSecrets.LoadOrStore(k, pool.NewSCRAMSecret([]byte(c.Salt), c.Iters, c.StoredKey, c.ServerKey))
	return v.(*pool.SCRAMSecret)
}

// recordClientKey keeps the ClientKey of a SCRAM exchange that creds
// verified (the three messages as sent), when creds are a verifier's
// (a plaintext password logs in with itself and records nothing).
func (s *Server) recordClientKey(creds scram.StoredCredentials, clientFirst, serverFirst, clientFinal string) {
	v, ok := s.scramSecrets.Load(secretKeyOf(creds))
	if !ok {
		return
	}
	sec := v.(*pool.SCRAMSecret)
	if sec.HasClientKey() {
		return
	}
	key, err := pool.RecoverClientKey(clientFirst, serverFirst, clientFinal, creds.StoredKey)
	if err == nil {
		err = sec.SetClientKey(key)
	}
	if err != nil {
		// The exchange verified, so this is a bug, not a client's doing.
		s.log.Error("cannot recover the client's SCRAM key for pass-through", zap.Error(err))
	}
}

// upperFirst capitalises a reason for a DETAIL sentence.
func upperFirst(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

// backendCredentials are what kineticd presents to the servers for u, to
// database: backend_user (default the name) with backend_password when
// set; else u's password as it is when plaintext, the verifier's
// pass-through secret when a SCRAM verifier, the hash itself when md5.
func (s *Server) backendCredentials(u *config.User, database string) pool.Credentials {
	user, pass := u.Backend()
	cred := pool.Credentials{User: user, Database: database}
	switch {
	case u.BackendPassword != "":
		cred.Password = pass
	case config.PasswordKind(pass) == config.PasswordSCRAMSHA256:
		if c, err := parseVerifier(pass); err == nil {
			cred.SCRAM = s.scramSecret(c)
		}
	case config.PasswordKind(pass) == config.PasswordMD5:
		cred.MD5 = pass
	default:
		cred.Password = pass
	}
	return cred
}
