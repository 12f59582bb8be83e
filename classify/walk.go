package classify

import (
	"slices"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// walker visits every node of a parse tree, in subqueries, CTEs, FROM
// items, expressions and clauses alike, through protobuf reflection: no
// node type can be forgotten when pg_query adds one.
type walker struct {
	c    *Classifier
	exec bool // the tree's expressions run: function calls count

	write   bool // a write function is called
	pin     bool // a function leaves session state behind
	temp    bool // a TEMP/TEMPORARY relation is created
	locking bool // FOR UPDATE/NO KEY UPDATE/SHARE/KEY SHARE
	dml     bool // INSERT/UPDATE/DELETE/MERGE (below a SELECT: a data-modifying CTE)
	into    bool // SELECT … INTO
	// intoBare: an INTO names its table without a schema (pg_temp first
	// in search_path makes it temporary: Statement.CreatesUnqualified).
	intoBare bool
	tempPath bool // set_config('search_path', …, true) that may name pg_temp (Statement.TempPath)
	funcs    []string
	rels     []string // relation names (RangeVar), for Statement.Relations
	ctes     []string // the statement's CTE names, which rels may name too
	unlogs   bool     // a relation named UNLOGGED, or ALTER … SET [UN]LOGGED
	cancels  []BackendArg

	// constRead: a rule read a constant's value (set_config's is_local),
	// so the classification does not hold for every text of the same
	// shape (shape.go). Every rule that looks at a constant must set it.
	constRead bool
}

func (w *walker) walk(m protoreflect.Message) {
	if !m.IsValid() {
		return
	}
	switch n := m.Interface().(type) {
	case *pg.FuncCall:
		if w.exec {
			w.funcCall(n)
		}
	case *pg.LockingClause:
		w.locking = true
	case *pg.InsertStmt, *pg.UpdateStmt, *pg.DeleteStmt, *pg.MergeStmt:
		w.dml = true
	case *pg.IntoClause:
		w.into = true
		// CREATE TABLE pg_temp.t AS …, SELECT … INTO pg_temp.t: a
		// temporary table without the TEMP keyword (the raw parse tree
		// says relpersistence 'p' until the schema is looked up).
		w.temp = w.temp || isTempSchema(n.GetRel().GetSchemaname())
		w.intoBare = w.intoBare || n.GetRel().GetSchemaname() == ""
	case *pg.RangeVar:
		if n.GetRelpersistence() == "t" {
			w.temp = true
		}
		w.rels = append(w.rels, n.GetRelname())
		w.unlogs = w.unlogs || n.GetRelpersistence() == "u"
		return
	case *pg.AlterTableCmd:
		if t := n.GetSubtype(); t == pg.AlterTableType_AT_SetUnLogged || t == pg.AlterTableType_AT_SetLogged {
			w.unlogs = true
		}
	case *pg.CreateSeqStmt, *pg.RenameStmt:
		// A name may become a sequence's (read on the primary too).
		w.unlogs = true
	case *pg.CommonTableExpr:
		w.ctes = append(w.ctes, n.GetCtename())
	case *pg.String, *pg.Integer, *pg.Float, *pg.Boolean, *pg.BitString, *pg.A_Const,
		*pg.ColumnRef, *pg.ParamRef, *pg.A_Star, *pg.TypeName:
		return // leaves: nothing below them matters
	}
	m.Range(w.field)
}

func (w *walker) field(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
	if fd.Kind() != protoreflect.MessageKind || fd.IsMap() {
		return true
	}
	if fd.IsList() {
		l := v.List()
		for i := 0; i < l.Len(); i++ {
			w.walk(l.Get(i).Message())
		}
		return true
	}
	w.walk(v.Message())
	return true
}

// unlogs reports whether a statement may change which relations are
// UNLOGGED or sequences (Statement.Unlogs): a relation it names as
// UNLOGGED, ALTER … SET UNLOGGED or SET LOGGED, CREATE SEQUENCE, a rename.
func unlogs(n *pg.Node) bool {
	w := walker{}
	w.walk(n.ProtoReflect())
	return w.unlogs
}

// relations is Statement.Relations: the relations named, less the names
// of the statement's CTEs (a reference to one is not a relation; a
// relation of the same name elsewhere in the statement is missed, at
// worst a read the replica refuses).
func (w *walker) relations() []string {
	return relationsLess(w.rels, w.ctes)
}

// relationsLess is rels less ctes, sorted and deduplicated.
func relationsLess(rels, ctes []string) []string {
	out := rels[:0:0]
	for _, r := range rels {
		if r != "" && !slices.Contains(ctes, r) {
			out = append(out, r)
		}
	}
	return sortedUnique(out)
}

// funcCall sorts one called function into write, safe or unknown.
func (w *walker) funcCall(f *pg.FuncCall) {
	names := f.GetFuncname()
	if len(names) == 0 {
		return
	}
	name := names[len(names)-1].GetString_().GetSval()
	schema := ""
	if len(names) >= 2 {
		schema = names[len(names)-2].GetString_().GetSval()
	}
	if strings.EqualFold(name, "current_setting") && (schema == "" || strings.EqualFold(schema, "pg_catalog")) {
		w.constRead = true // its argument decides
		if serverRoleSetting(settingName(f.GetArgs())) {
			w.write = true
			return
		}
	}
	if strings.EqualFold(name, "pg_cancel_backend") && (schema == "" || strings.EqualFold(schema, "pg_catalog")) {
		if arg, ok := backendArg(f.GetArgs()); ok {
			w.cancels = append(w.cancels, arg)
			w.constRead = w.constRead || arg.Param == 0 // the constant is the answer
		}
	}
	fl, unknown := w.c.funcKind(schema, name)
	switch {
	case fl != 0:
		w.write = true
		pin := fl&fnPin != 0
		if pin && strings.EqualFold(name, "set_config") {
			w.constRead = true // its is_local argument decides
			pin = !setConfigIsLocal(f.GetArgs())
			w.tempPath = w.tempPath || !pin && setConfigTempPath(f.GetArgs())
		}
		w.pin = w.pin || pin
	case unknown:
		w.funcs = append(w.funcs, name)
	}
}

// funcKind sorts a called function (schema "" when unqualified): a write
// (fl != 0, with fnPin when it leaves session state behind), a known-safe
// function, or unknown (for the catalog lookup).
func (c *Classifier) funcKind(schema, name string) (fl fnFlags, unknown bool) {
	lname, lschema := strings.ToLower(name), strings.ToLower(schema)
	if c.fns.isWrite(lschema, lname) {
		return fnWrite, false
	}
	// Built-in write functions are matched in any schema and any case:
	// a user function of the same name goes to the primary too.
	if fl := builtinWrite(lname); fl != 0 {
		return fl, false
	}
	if c.fns.isReadOnly(lschema, lname) {
		return 0, false
	}
	if _, ok := safeFunctions[name]; ok && (schema == "" || schema == "pg_catalog") {
		return 0, false
	}
	return 0, true
}

// backendArg is a call's first argument as a process ID: an integer
// constant or a parameter, either maybe cast (12345, $1, $1::int).
func backendArg(args []*pg.Node) (BackendArg, bool) {
	if len(args) == 0 {
		return BackendArg{}, false
	}
	n := args[0]
	for n.GetTypeCast() != nil {
		n = n.GetTypeCast().GetArg()
	}
	switch {
	case n.GetParamRef() != nil:
		return BackendArg{Param: int(n.GetParamRef().GetNumber())}, n.GetParamRef().GetNumber() > 0
	case n.GetAConst() != nil && n.GetAConst().GetIval() != nil:
		return BackendArg{PID: int64(n.GetAConst().GetIval().GetIval())}, true
	}
	return BackendArg{}, false
}

// settingName is current_setting's first argument when it is a string
// constant; anything else (a parameter, an expression) could name any
// setting, and reports "?".
func settingName(args []*pg.Node) string {
	if len(args) == 0 {
		return ""
	}
	if a := args[0].GetAConst(); a != nil && a.GetSval() != nil {
		return a.GetSval().GetSval()
	}
	return "?"
}

// serverRoleSetting reports whether a SHOW or current_setting of name
// answers what kind of server it runs on rather than what the session set:
// transaction_read_only is on for every transaction of a hot standby,
// while the client's session (its primary's) can write. pgJDBC's
// targetServerType=primary and libpq's target_session_attrs=read-write
// (before PostgreSQL 14) ask SHOW transaction_read_only to find a primary.
// A name that is not a constant ("?") may be it.
func serverRoleSetting(name string) bool {
	return name == "?" || strings.EqualFold(strings.TrimSpace(name), "transaction_read_only")
}

// setConfigIsLocal reports whether set_config's is_local argument is a
// literal true: the setting then ends with the transaction. Anything else
// (false, a parameter, an expression) counts as a session change.
func setConfigIsLocal(args []*pg.Node) bool {
	if len(args) != 3 {
		return false
	}
	a := args[2].GetAConst()
	if a == nil {
		return false
	}
	if b := a.GetBoolval(); b != nil {
		return b.GetBoolval()
	}
	if s := a.GetSval(); s != nil {
		switch strings.ToLower(s.GetSval()) {
		case "t", "true", "on", "yes", "y", "1":
			return true
		}
	}
	return false
}

// funcLists holds the configured function names.
type funcLists struct {
	writeAny, writeQualified, writeBare map[string]struct{}
	readAny, readQualified              map[string]struct{}
}

func newFuncLists(writeFns, readFns []string) funcLists {
	l := funcLists{
		writeAny: map[string]struct{}{}, writeQualified: map[string]struct{}{}, writeBare: map[string]struct{}{},
		readAny: map[string]struct{}{}, readQualified: map[string]struct{}{},
	}
	for _, n := range writeFns {
		n = strings.ToLower(strings.TrimSpace(n))
		if i := strings.LastIndexByte(n, '.'); i >= 0 {
			l.writeQualified[n] = struct{}{}
			l.writeBare[n[i+1:]] = struct{}{}
		} else if n != "" {
			l.writeAny[n] = struct{}{}
		}
	}
	for _, n := range readFns {
		n = strings.ToLower(strings.TrimSpace(n))
		if strings.IndexByte(n, '.') >= 0 {
			l.readQualified[n] = struct{}{}
		} else if n != "" {
			l.readAny[n] = struct{}{}
		}
	}
	return l
}

// isWrite: "name" matches in any schema; "schema.name" matches calls so
// qualified and unqualified calls of name (which may resolve to it).
func (l *funcLists) isWrite(schema, name string) bool {
	if _, ok := l.writeAny[name]; ok {
		return true
	}
	if schema == "" {
		_, ok := l.writeBare[name]
		return ok
	}
	_, ok := l.writeQualified[schema+"."+name]
	return ok
}

// isReadOnly: "name" matches in any schema; "schema.name" only calls so
// qualified.
func (l *funcLists) isReadOnly(schema, name string) bool {
	if _, ok := l.readAny[name]; ok {
		return true
	}
	if schema == "" {
		return false
	}
	_, ok := l.readQualified[schema+"."+name]
	return ok
}

// setConfigTempPath reports whether set_config's arguments may set
// search_path to a list naming pg_temp: a literal name search_path (or a
// name not given as a literal) with a value naming it, or not given as a
// literal.
func setConfigTempPath(args []*pg.Node) bool {
	if len(args) != 3 {
		return false
	}
	if name := args[0].GetAConst().GetSval(); name != nil && !strings.EqualFold(strings.TrimSpace(name.GetSval()), "search_path") {
		return false
	}
	value := args[1].GetAConst().GetSval()
	return value == nil || NamesTempSchema(value.GetSval())
}

// NamesTempSchema reports whether a search_path value may name the
// temporary schema (pg_temp, or pg_temp_N): any mention counts, whatever
// its quoting or place in the list, so an unqualified CREATE under it
// pins the session at worst without need.
func NamesTempSchema(path string) bool {
	return strings.Contains(strings.ToLower(path), "pg_temp")
}
