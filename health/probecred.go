package health

import "github.com/pg-kinetic/pg-kinetic/pool"

// NewPGProberWith is NewPGProber with the credentials as the proxy's
// sessions present them, pass-through secrets included (pool.Credentials
// SCRAM or MD5: a prober holding only a SCRAM secret logs in once a
// client has proved it). cred.Params is replaced, as NewPGProber sets it.
func NewPGProberWith(cred pool.Credentials, tlsMode string) *PGProber {
	p := NewPGProber(cred.User, cred.Password, cred.Database, tlsMode)
	p.cred.SCRAM, p.cred.MD5 = cred.SCRAM, cred.MD5
	return p
}
