package classify

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// Kind of a statement for routing.
type Kind uint8

const (
	// KindRead may be served by a replica: SELECT without side effects,
	// VALUES, TABLE, SHOW, EXPLAIN (without ANALYZE of anything, or ANALYZE
	// of a read), FETCH/MOVE/CLOSE, and the session and transaction control
	// statements whose Tx or Effect the router acts on.
	KindRead Kind = iota
	// KindWrite must go to the primary.
	KindWrite
)

func (k Kind) String() string {
	if k == KindRead {
		return "read"
	}
	return "write"
}

// Tx is a statement's transaction-control role.
type Tx uint8

const (
	TxNone Tx = iota
	// TxBegin: BEGIN / START TRANSACTION without an access mode (it may
	// carry ISOLATION LEVEL up to REPEATABLE READ or DEFERRABLE). Opens a
	// write-capable transaction.
	TxBegin
	// TxBeginReadOnly: BEGIN / START TRANSACTION whose last access mode is
	// READ ONLY, with options a hot standby accepts.
	TxBeginReadOnly
	// TxBeginReadWrite: BEGIN / START TRANSACTION that only the primary
	// runs: READ WRITE among its options (even before a READ ONLY that
	// wins), or SERIALIZABLE (a hot standby refuses both, 0A000).
	TxBeginReadWrite
	// TxSetReadOnly: SET TRANSACTION READ ONLY, and SET [LOCAL]
	// transaction_read_only = on (the same thing spelt as a variable).
	// SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY is a session
	// setting (EffectSet), not this.
	TxSetReadOnly
	// TxEnd: COMMIT, END, ROLLBACK, ABORT (Statement.Chain tells AND
	// CHAIN), and PREPARE TRANSACTION, which ends the transaction block of
	// the session too (it is also a write with EffectPin).
	TxEnd
	// TxSavepoint: SAVEPOINT, RELEASE [SAVEPOINT], ROLLBACK TO [SAVEPOINT].
	TxSavepoint
)

// SavepointOp tells the three savepoint commands apart.
type SavepointOp uint8

const (
	SavepointSet      SavepointOp = iota + 1 // SAVEPOINT name
	SavepointRelease                         // RELEASE [SAVEPOINT] name
	SavepointRollback                        // ROLLBACK TO [SAVEPOINT] name
)

// Savepoint is a savepoint command of a statement.
type Savepoint struct {
	Op   SavepointOp
	Name string
}

var txNames = [...]string{"none", "begin", "begin_read_only", "begin_read_write", "set_read_only", "end", "savepoint"}

func (t Tx) String() string {
	if int(t) < len(txNames) {
		return txNames[t]
	}
	return "tx?"
}

// Effect is a session effect the router must track.
type Effect uint8

const (
	EffectNone Effect = iota
	// EffectSet: SET / RESET / RESET ALL / SET ROLE / SET SESSION
	// AUTHORIZATION / SET SESSION CHARACTERISTICS…, not LOCAL: a replayable
	// session setting, in Statement.Setting (and MoreSettings).
	EffectSet
	// EffectPin pins the session to the primary: temporary tables, views
	// and sequences, session-level advisory locks, LISTEN, DECLARE … WITH
	// HOLD, PREPARE TRANSACTION, set_config(…, false), LOAD, and a SET
	// whose value cannot be replayed as text.
	EffectPin
	// EffectDiscardAll: DISCARD ALL releases pins and clears settings and
	// prepared statements.
	EffectDiscardAll
	// EffectPrepare: SQL PREPARE name AS stmt. Statement.PrepareName and
	// Statement.Inner (the classification of stmt) are set.
	EffectPrepare
	// EffectExecute: SQL EXECUTE name (also under EXPLAIN). The router
	// classifies by the remembered PREPARE, and by ParamsWrite and Funcs.
	EffectExecute
	// EffectDeallocate: DEALLOCATE [PREPARE] name | ALL (PrepareName "").
	EffectDeallocate
	// EffectUnlisten: UNLISTEN; a write that does not release a pin.
	EffectUnlisten
)

var effectNames = [...]string{"none", "set", "pin", "discard_all", "prepare", "execute", "deallocate", "unlisten"}

func (e Effect) String() string {
	if int(e) < len(effectNames) {
		return effectNames[e]
	}
	return "effect?"
}

// Reasons, in SPEC §8's vocabulary.
const (
	ReasonRead         = "read"
	ReasonWrite        = "write"
	ReasonUnclassified = "unclassified"
)

// Statement is the classification of one statement.
type Statement struct {
	Kind   Kind
	Reason string // ReasonRead or ReasonWrite ("unclassified" is decided for a whole text)
	Tx     Tx
	Chain  bool // COMMIT/ROLLBACK AND CHAIN
	// Rollback: a TxEnd that commits nothing (ROLLBACK, ABORT).
	Rollback bool
	// Start: a transaction begun with START TRANSACTION, whose command
	// tag is START TRANSACTION (BEGIN's is BEGIN).
	Start bool
	// SetsTx: SET TRANSACTION of characteristics a hot standby runs
	// (isolation level up to REPEATABLE READ, READ ONLY, DEFERRABLE), in
	// the grammar's own form, so it cannot fail before a query: first in
	// a transaction the proxy has not sent yet, it may wait with its
	// BEGIN for the statement that places the transaction.
	SetsTx bool
	// Savepoint is set with TxSavepoint: the command and the savepoint's
	// name (as PostgreSQL compares it: folded to lower case unless
	// quoted).
	Savepoint Savepoint
	Effect    Effect
	// Setting is set with EffectSet: what set_config(Name, Value, false)
	// would do, or a reset (RESET name, SET name TO DEFAULT: Value "",
	// Reset; RESET ALL: Name "" too). Names are lower case.
	Setting Setting
	// MoreSettings holds the further settings of one statement that sets
	// several (SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL
	// SERIALIZABLE, READ ONLY). Usually nil.
	MoreSettings []Setting
	PrepareName  string     // EffectPrepare, EffectExecute, EffectDeallocate ("" for ALL)
	Inner        *Statement // EffectPrepare: the prepared statement's classification
	// Executes names the SQL-prepared statement that CREATE TABLE AS
	// EXECUTE runs (a write: EXECUTE's own is PrepareName, with
	// EffectExecute): it must be prepared wherever the statement runs.
	Executes string
	// ParamsWrite: with EffectExecute, a parameter expression of EXECUTE
	// itself calls a write function (EXECUTE p(nextval('s'))).
	ParamsWrite bool
	// CopyIn is COPY ... FROM STDIN: the server then takes only copy
	// messages until the client's CopyDone or CopyFail.
	CopyIn bool
	// Funcs lists the functions the statement calls that are in no
	// built-in list nor in the configured ones, as PostgreSQL folds them
	// (lower case unless quoted), unqualified, sorted and deduplicated, so
	// the router can look up their volatility in the primary's pg_proc. A
	// read with non-empty Funcs is a read only provisionally: the router
	// makes it a write if any is VOLATILE. Writes carry no Funcs, except
	// EXECUTE (its parameters).
	Funcs []string
	// Relations lists the relations a read names (tables, views,
	// sequences…; not the statement's own CTEs), unqualified as PostgreSQL
	// folds them, sorted and deduplicated, so the router can look up in
	// the primary's pg_class whether any is UNLOGGED: a hot standby
	// cannot read those (0A000), so such a read goes to the primary.
	// Writes carry none.
	Relations []string
	// Unlogs: the statement may change which relations are UNLOGGED or
	// sequences (CREATE SEQUENCE, a rename too)
	// (CREATE UNLOGGED TABLE or SEQUENCE, … AS, SELECT … INTO UNLOGGED,
	// ALTER … SET UNLOGGED or SET LOGGED): what the router knows of
	// unlogged relations may be out of date once it ran.
	Unlogs bool
	// NoWAL: the statement writes no WAL wherever it runs (SET, RESET,
	// LISTEN, UNLISTEN, NOTIFY), so a unit of only such statements needs
	// no new token.
	NoWAL bool
	// CreatesUnqualified: the statement creates a relation, view,
	// sequence, type, function or other named object without naming its
	// schema. PostgreSQL puts it in the temporary schema when pg_temp
	// comes first in the session's search_path: the router pins the
	// session when it may (TempPath, the session's settings).
	CreatesUnqualified bool
	// TempPath: a SET LOCAL search_path or set_config('search_path', …,
	// true) whose value names pg_temp (or a value not known here): it
	// may make the transaction's unqualified CREATEs temporary. A
	// session-wide SET carries its value in Setting instead.
	TempPath bool
	// Cancels lists the calls pg_cancel_backend(pid) of a SELECT whose
	// argument is an integer constant or a parameter ($n, maybe cast), in
	// order: the router relays such a cancel of a session's primary
	// backend to the replica running that session's statement. Usually
	// nil.
	Cancels []BackendArg
}

// BackendArg is the process ID argument of a call: the constant PID, or
// the parameter that carries it (Param is $n, 1-based; 0 for a constant).
type BackendArg struct {
	PID   int64
	Param int
}

// Setting is one session setting (EffectSet).
type Setting struct {
	Name, Value string
	Reset       bool
}

// Decision is the classification of one query text. It is shared with the
// cache: callers must not modify its slices.
type Decision struct {
	Statements []Statement // one per statement, in order; nil when the text does not parse or is empty
	Hints      Hints       // from the leading comment of the text, if any
	Kind       Kind        // KindRead only when every statement is a read
	Reason     string      // ReasonRead, ReasonWrite or ReasonUnclassified
	Funcs      []string    // union of the statements' Funcs when Kind is KindRead; else nil
	Relations  []string    // union of the statements' Relations when Kind is KindRead; else nil
	// Control is true when some statement has a Tx or an Effect: the
	// router must walk Statements. When false, Kind and Funcs say all.
	Control bool
}

// Options configure a Classifier. The zero value is usable.
type Options struct {
	// CacheSize is the number of texts whose decisions are kept (LRU).
	// 0 means 10000; negative disables the cache (both levels).
	CacheSize int
	// ShapeCacheSize is the number of statement shapes whose decisions are
	// kept (shape.go): texts that differ only in constants share one.
	// 0 means CacheSize; negative disables the shape level.
	ShapeCacheSize int
	// CacheBytes bounds the memory both levels hold together (texts, shape
	// keys and decisions, estimated); the shape level takes a quarter.
	// 0 means 32 MiB.
	CacheBytes int
	// MaxCachedText is the longest text (bytes) that is cached; longer ones
	// are classified every time (bulk statements are rarely repeated and
	// would crowd out the rest). 0 means 64 KiB.
	MaxCachedText int
	// WriteFunctions (routes.read_routing.write_functions): calling any
	// makes a statement a write. "name" matches the function in any
	// schema; "schema.name" matches calls so qualified and unqualified
	// calls of name. Case-insensitive.
	WriteFunctions []string
	// ReadOnlyFunctions (read_only_functions): known safe on a replica
	// even if VOLATILE. "name" matches any schema, "schema.name" only calls
	// so qualified. Built-in write functions (nextval, …) stay writes.
	ReadOnlyFunctions []string
}

// Classifier classifies query texts. It is safe for concurrent use.
type Classifier struct {
	cache         *cache // by exact text; nil when disabled
	shapes        *cache // by shape key (shape.go); nil when disabled
	markSeed      maphash.Seed
	maxCachedText int
	parsed        atomic.Uint64 // classifications that parsed (the misses)
	fns           funcLists
	noFastPath    bool // testing knob: always take the full path
}

// New returns a Classifier with the given options.
func New(opts Options) *Classifier {
	size := opts.CacheSize
	if size == 0 {
		size = 10000
	}
	maxText := opts.MaxCachedText
	if maxText <= 0 {
		maxText = 64 << 10
	}
	c := &Classifier{
		maxCachedText: maxText,
		fns:           newFuncLists(opts.WriteFunctions, opts.ReadOnlyFunctions),
	}
	if size > 0 {
		maxBytes := opts.CacheBytes
		if maxBytes <= 0 {
			maxBytes = 32 << 20
		}
		shapeSize := opts.ShapeCacheSize
		if shapeSize == 0 {
			shapeSize = size
		}
		if shapeSize > 0 {
			shapeBytes := maxBytes / 4
			maxBytes -= shapeBytes
			c.shapes = newCache(shapeSize, shapeBytes)
			c.markSeed = maphash.MakeSeed()
		}
		c.cache = newCache(size, maxBytes)
	}
	return c
}

// Classify returns the decision for one query text (a simple-protocol
// Query, or the text of one Parse). Decisions are cached at two levels:
// by exact text, where a hit neither parses nor allocates, and by shape
// (shape.go), where a text that differs from a classified one only in
// constants costs one normalisation instead of a parse. The returned
// slices are shared.
func (c *Classifier) Classify(sql string) Decision {
	if c.cache == nil || len(sql) > c.maxCachedText {
		c.parsed.Add(1)
		d, _ := c.decide(sql)
		return d
	}
	if d, ok := c.cache.get(sql); ok {
		return d
	}
	var key string
	if c.shapes != nil {
		if key = shapeKey(sql); key != "" {
			d, ok, again := c.shapes.getMarked(key, maphash.String(c.markSeed, sql))
			if ok {
				if again {
					// The same text twice in a row: worth an exact entry.
					// Texts seen once (a different literal every time)
					// stay out, so they cannot flush the exact level.
					c.cache.put(strings.Clone(sql), d)
				}
				return d
			}
		}
	}
	c.parsed.Add(1)
	d, shared := c.decide(sql)
	c.cache.put(strings.Clone(sql), d)
	if shared && key != "" {
		c.shapes.put(key, d) // key is our own string (from C)
	}
	return d
}

// CacheStats counts classifications by the level that answered them, and
// the entries each level holds.
type CacheStats struct {
	TextHits                  uint64 // the exact text was cached
	ShapeHits                 uint64 // a text differing only in constants was (shape.go)
	Misses                    uint64 // parsed: first seen, not shareable, or too long to cache
	TextEntries, ShapeEntries int
}

// Stats reports the caches' counters. Every Classify counts once.
func (c *Classifier) Stats() CacheStats {
	st := CacheStats{
		TextHits:  c.cache.hits(),
		ShapeHits: c.shapes.hits(),
		Misses:    c.parsed.Load(),
	}
	st.TextEntries, _ = c.cache.size()
	st.ShapeEntries, _ = c.shapes.size()
	return st
}

// decide classifies a text without the cache. shared reports that the
// decision holds for every text of the same shape (shape.go).
func (c *Classifier) decide(sql string) (d Decision, shared bool) {
	hints, _ := ParseHints(sql)
	text := sql
	escaped := !utf8.ValidString(sql)
	if escaped {
		var ok bool
		if text, ok = escapeInvalidUTF8(sql); !ok {
			return Decision{Hints: hints, Kind: KindWrite, Reason: ReasonUnclassified}, false
		}
	}
	d, shared, ok := c.decideText(text)
	if !ok {
		return Decision{Hints: hints, Kind: KindWrite, Reason: ReasonUnclassified}, false
	}
	if escaped {
		unescapeDecision(&d)
		shared = false // the stand-ins depend on the literals' bytes
	}
	d.Hints = hints
	return d, shared && !d.Control
}

// decideText classifies valid UTF-8 text; ok is false when it does not
// parse. shared is true when every statement may be shared by shape
// (statementShared).
func (c *Classifier) decideText(sql string) (d Decision, shared, ok bool) {
	d = Decision{Kind: KindRead, Reason: ReasonRead}
	if !c.noFastPath {
		stmts, ok, err := c.fastSelects(sql)
		if err != nil {
			return d, false, false
		}
		if ok {
			if len(stmts) > 0 {
				d.Statements = make([]Statement, len(stmts))
			}
			var all, rels []string
			for i, f := range stmts {
				d.Statements[i] = Statement{Kind: KindRead, Reason: ReasonRead, Funcs: f.funcs, Relations: f.rels}
				all = append(all, f.funcs...)
				rels = append(rels, f.rels...)
			}
			d.Funcs, d.Relations = sortedUnique(all), sortedUnique(rels)
			// Only SELECTs calling no write function: no rule read a
			// constant.
			return d, true, true
		}
	}
	tree, err := pg.Parse(sql)
	if err != nil {
		return d, false, false
	}
	if len(tree.Stmts) == 0 {
		return d, false, true // empty or only comments: the server answers EmptyQueryResponse
	}
	d.Statements = make([]Statement, 0, len(tree.Stmts))
	var funcs, rels []string
	shared = true
	for _, raw := range tree.Stmts {
		st, sh := c.statementShared(raw.GetStmt())
		st.Unlogs = st.Kind == KindWrite && unlogs(raw.GetStmt())
		shared = shared && sh
		if st.Kind == KindWrite {
			d.Kind, d.Reason = KindWrite, ReasonWrite
		}
		if st.Tx != TxNone || st.Effect != EffectNone {
			d.Control = true
		}
		funcs = append(funcs, st.Funcs...)
		rels = append(rels, st.Relations...)
		d.Statements = append(d.Statements, st)
	}
	if d.Kind == KindRead {
		d.Funcs, d.Relations = sortedUnique(funcs), sortedUnique(rels)
	}
	return d, shared, true
}

func sortedUnique(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	slices.Sort(s)
	return slices.Clip(slices.Compact(s))
}
