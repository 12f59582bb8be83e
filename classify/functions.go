package classify

import "strings"

// The function lists. Names are as PostgreSQL stores them in pg_proc.proname
// (lower case). Three outcomes exist for a called function:
//
//   - in writeFunctions (or matching writePrefixes): the statement is a write;
//     with fnPin it also pins the session to the primary (SPEC §3, state that
//     cannot be replayed on another server);
//   - in safeFunctions: never a reason to leave the replica, whatever its
//     volatility (immutable and stable built-ins, and the volatile built-ins
//     that are harmless on a standby, like random and clock_timestamp);
//   - anything else is reported in Statement.Funcs for a catalog lookup.
//
// Adding a function here is a routing decision: a safe function wrongly
// listed sends a side effect to a replica, where it fails (read-only
// transaction) or is lost. When in doubt leave it out; the catalog lookup
// decides then.

// fnFlags describes a write function.
type fnFlags uint8

const (
	fnWrite fnFlags = 1 << iota // must run on the primary
	fnPin                       // leaves session state behind: pins the session
)

// writeFunctions are built-ins with side effects, or that only work on (or
// only mean something on) the primary.
var writeFunctions = map[string]fnFlags{
	// Sequences.
	"nextval": fnWrite,
	"setval":  fnWrite,
	"currval": fnWrite, // session state of nextval, which ran on the primary
	"lastval": fnWrite,

	// Advisory locks. Session-level locks outlive the statement: pin.
	// Transaction-level ones end with the transaction: only a write.
	"pg_advisory_lock":                 fnWrite | fnPin,
	"pg_advisory_lock_shared":          fnWrite | fnPin,
	"pg_try_advisory_lock":             fnWrite | fnPin,
	"pg_try_advisory_lock_shared":      fnWrite | fnPin,
	"pg_advisory_unlock":               fnWrite,
	"pg_advisory_unlock_shared":        fnWrite,
	"pg_advisory_unlock_all":           fnWrite,
	"pg_advisory_xact_lock":            fnWrite,
	"pg_advisory_xact_lock_shared":     fnWrite,
	"pg_try_advisory_xact_lock":        fnWrite,
	"pg_try_advisory_xact_lock_shared": fnWrite,

	// Session state that cannot be replayed from the text. set_config with
	// is_local = true is only a write; see setConfigIsLocal.
	"set_config": fnWrite | fnPin,
	"setseed":    fnWrite | fnPin,

	// Notifications.
	"pg_notify": fnWrite,

	// Transaction ids: assigning one is a write; the primary's only.
	"txid_current":                   fnWrite,
	"txid_current_if_assigned":       fnWrite,
	"pg_current_xact_id":             fnWrite,
	"pg_current_xact_id_if_assigned": fnWrite,

	// Large objects (lo_* is also matched as a prefix).
	"loread":  fnWrite,
	"lowrite": fnWrite,

	// The session's identity: the client was given the primary server's
	// PID in BackendKeyData (session pooling), so the function answers
	// there, where pg_terminate_backend and pg_cancel_backend of it act.
	"pg_backend_pid": fnWrite,

	// Server and backend administration.
	"pg_terminate_backend":                fnWrite,
	"pg_cancel_backend":                   fnWrite,
	"pg_reload_conf":                      fnWrite,
	"pg_rotate_logfile":                   fnWrite,
	"pg_switch_wal":                       fnWrite,
	"pg_create_restore_point":             fnWrite,
	"pg_start_backup":                     fnWrite,
	"pg_stop_backup":                      fnWrite,
	"pg_backup_start":                     fnWrite,
	"pg_backup_stop":                      fnWrite,
	"pg_promote":                          fnWrite,
	"pg_wal_replay_pause":                 fnWrite,
	"pg_wal_replay_resume":                fnWrite,
	"pg_log_backend_memory_contexts":      fnWrite,
	"pg_log_standby_snapshot":             fnWrite,
	"pg_import_system_collations":         fnWrite,
	"pg_current_wal_lsn":                  fnWrite, // errors during recovery
	"pg_current_wal_insert_lsn":           fnWrite,
	"pg_current_wal_flush_lsn":            fnWrite,
	"pg_walfile_name":                     fnWrite,
	"pg_walfile_name_offset":              fnWrite,
	"pg_export_snapshot":                  fnWrite,
	"pg_file_write":                       fnWrite,
	"pg_file_rename":                      fnWrite,
	"pg_file_unlink":                      fnWrite,
	"pg_file_sync":                        fnWrite,
	"pg_drop_replication_slot":            fnWrite,
	"pg_replication_slot_advance":         fnWrite,
	"pg_sync_replication_slots":           fnWrite,
	"pg_logical_emit_message":             fnWrite,
	"pg_logical_slot_get_changes":         fnWrite, // consumes the slot
	"pg_logical_slot_get_binary_changes":  fnWrite,
	"pg_logical_slot_peek_changes":        fnWrite,
	"pg_logical_slot_peek_binary_changes": fnWrite,
	"brin_summarize_range":                fnWrite,
	"brin_summarize_new_values":           fnWrite,
	"brin_desummarize_range":              fnWrite,
	"gin_clean_pending_list":              fnWrite,
	"pg_nextoid":                          fnWrite,

	// dblink: a named connection lives as long as the session.
	"dblink_connect":                      fnWrite | fnPin,
	"dblink_connect_u":                    fnWrite | fnPin,
	"pg_replication_origin_session_setup": fnWrite | fnPin,
}

// writePrefixes are families of write functions matched by name prefix.
var writePrefixes = []string{
	"lo_",                    // lo_import, lo_export, lo_create, lo_unlink, lo_put, lo_from_bytea, …
	"pg_stat_reset",          // pg_stat_reset, pg_stat_reset_shared, pg_stat_reset_single_*, …
	"pg_replication_origin_", // create, drop, advance, session setup/reset, xact setup/reset
	"dblink",                 // dblink, dblink_exec, dblink_open, dblink_send_query, …
	"pg_create_",             // pg_create_physical/logical_replication_slot, pg_create_restore_point
	"pg_copy_",               // pg_copy_physical/logical_replication_slot
}

// builtinWrite reports the flags of a built-in write function, by name.
func builtinWrite(name string) fnFlags {
	if f, ok := writeFunctions[name]; ok {
		return f
	}
	for _, p := range writePrefixes {
		if strings.HasPrefix(name, p) {
			return fnWrite
		}
	}
	return 0
}

// safeFunctions are built-ins that never force the primary. They are
// matched only when called unqualified or as pg_catalog.NAME (a function of
// the same name in another schema is looked up in the catalog instead).
var safeFunctions = toSet(
	// Volatile but harmless on a standby (SPEC §3's known-safe built-ins).
	"random", "random_normal", "gen_random_uuid", "uuid_generate_v1", "uuid_generate_v1mc",
	"uuid_generate_v4", "uuidv4", "clock_timestamp", "timeofday", "now", "statement_timestamp",
	"transaction_timestamp", "pg_sleep", "pg_sleep_for", "pg_sleep_until",
	"inet_server_port", "inet_server_addr", "inet_client_port", "inet_client_addr",
	"pg_is_in_recovery", "pg_last_wal_replay_lsn", "pg_last_wal_receive_lsn",
	"pg_last_xact_replay_timestamp", "pg_postmaster_start_time", "pg_conf_load_time",
	"txid_current_snapshot", "pg_current_snapshot", "txid_snapshot_xmin", "txid_snapshot_xmax",
	"pg_snapshot_xmin", "pg_snapshot_xmax", "pg_snapshot_xip", "txid_snapshot_xip",
	"array_shuffle", "array_sample", "gen_salt",

	// Aggregates.
	"count", "sum", "avg", "min", "max", "array_agg", "string_agg", "json_agg", "jsonb_agg",
	"json_agg_strict", "jsonb_agg_strict", "json_object_agg", "jsonb_object_agg",
	"json_object_agg_strict", "jsonb_object_agg_strict", "json_object_agg_unique",
	"jsonb_object_agg_unique", "json_object_agg_unique_strict", "jsonb_object_agg_unique_strict",
	"bool_and", "bool_or", "every", "bit_and", "bit_or", "bit_xor", "stddev", "stddev_pop",
	"stddev_samp", "variance", "var_pop", "var_samp", "corr", "covar_pop", "covar_samp",
	"regr_avgx", "regr_avgy", "regr_count", "regr_intercept", "regr_r2", "regr_slope", "regr_sxx",
	"regr_sxy", "regr_syy", "percentile_cont", "percentile_disc", "mode", "any_value",
	"range_agg", "range_intersect_agg", "xmlagg",

	// Window functions.
	"row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "lag", "lead",
	"first_value", "last_value", "nth_value",

	// Mathematics.
	"abs", "ceil", "ceiling", "floor", "round", "trunc", "sqrt", "cbrt", "exp", "ln", "log",
	"log10", "power", "pow", "mod", "div", "sign", "pi", "degrees", "radians", "sin", "cos",
	"tan", "cot", "asin", "acos", "atan", "atan2", "sind", "cosd", "tand", "cotd", "asind",
	"acosd", "atand", "atan2d", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "gcd", "lcm",
	"factorial", "width_bucket", "scale", "min_scale", "trim_scale", "erf", "erfc",
	"numeric", "int2", "int4", "int8", "float4", "float8",

	// Strings and bytes.
	"length", "char_length", "character_length", "octet_length", "bit_length", "lower", "upper",
	"initcap", "substr", "substring", "position", "strpos", "replace", "translate", "btrim",
	"ltrim", "rtrim", "lpad", "rpad", "left", "right", "repeat", "reverse", "concat",
	"concat_ws", "format", "split_part", "string_to_array", "string_to_table",
	"array_to_string", "regexp_replace", "regexp_match", "regexp_matches",
	"regexp_split_to_array", "regexp_split_to_table", "regexp_like", "regexp_count",
	"regexp_instr", "regexp_substr", "starts_with", "md5", "sha224", "sha256", "sha384",
	"sha512", "encode", "decode", "ascii", "chr", "to_hex", "to_bin", "to_oct", "quote_ident",
	"quote_literal", "quote_nullable", "overlay", "normalize", "is_normalized", "unistr",
	"to_ascii", "convert", "convert_from", "convert_to", "get_byte", "set_byte", "get_bit",
	"set_bit", "bit_count", "crc32", "crc32c", "like_escape", "similar_to_escape", "text",
	"casefold", "pg_client_encoding", "pg_encoding_to_char", "crypt", "digest", "hmac",

	// Date and time.
	"date_trunc", "date_part", "extract", "date_bin", "age", "to_char", "to_date",
	"to_timestamp", "to_number", "make_date", "make_time", "make_timestamp", "make_timestamptz",
	"make_interval", "justify_days", "justify_hours", "justify_interval", "isfinite",
	"timezone", "date_add", "date_subtract", "overlaps",

	// JSON.
	"to_json", "to_jsonb", "json_build_object", "jsonb_build_object", "json_build_array",
	"jsonb_build_array", "json_object", "jsonb_object", "json_array_length",
	"jsonb_array_length", "json_each", "jsonb_each", "json_each_text", "jsonb_each_text",
	"json_extract_path", "jsonb_extract_path", "json_extract_path_text",
	"jsonb_extract_path_text", "json_object_keys", "jsonb_object_keys", "json_array_elements",
	"jsonb_array_elements", "json_array_elements_text", "jsonb_array_elements_text",
	"json_typeof", "jsonb_typeof", "json_strip_nulls", "jsonb_strip_nulls", "jsonb_set",
	"jsonb_set_lax", "jsonb_insert", "jsonb_pretty", "jsonb_path_exists", "jsonb_path_match",
	"jsonb_path_query", "jsonb_path_query_array", "jsonb_path_query_first",
	"jsonb_path_exists_tz", "jsonb_path_match_tz", "jsonb_path_query_tz",
	"jsonb_path_query_array_tz", "jsonb_path_query_first_tz", "row_to_json", "array_to_json",
	"json_populate_record", "jsonb_populate_record", "jsonb_populate_record_valid",
	"json_populate_recordset", "jsonb_populate_recordset", "json_to_record", "jsonb_to_record",
	"json_to_recordset", "jsonb_to_recordset", "json_scalar", "json_serialize",

	// Arrays and sets.
	"array_length", "array_lower", "array_upper", "array_dims", "array_ndims", "cardinality",
	"array_append", "array_prepend", "array_cat", "array_position", "array_positions",
	"array_remove", "array_replace", "array_fill", "trim_array", "unnest",
	"generate_subscripts", "generate_series", "array_reverse", "array_sort",

	// Ranges.
	"lower_inc", "upper_inc", "lower_inf", "upper_inf", "isempty", "range_merge", "int4range",
	"int8range", "numrange", "tsrange", "tstzrange", "daterange", "int4multirange",
	"int8multirange", "nummultirange", "tsmultirange", "tstzmultirange", "datemultirange",

	// Network addresses.
	"host", "hostmask", "masklen", "netmask", "network", "broadcast", "family", "abbrev",
	"inet_same_family", "inet_merge", "set_masklen",

	// Text search.
	"to_tsvector", "to_tsquery", "plainto_tsquery", "phraseto_tsquery", "websearch_to_tsquery",
	"ts_rank", "ts_rank_cd", "ts_headline", "setweight", "strip", "tsvector_to_array",
	"array_to_tsvector", "numnode", "querytree", "ts_lexize", "ts_delete",
	"ts_filter", "get_current_ts_config",

	// Catalog and session information.
	"version", "current_database", "current_schema", "current_schemas", "current_setting",
	"current_query", "pg_typeof", "format_type", "pg_get_viewdef", "pg_get_triggerdef",
	"pg_get_indexdef", "pg_get_constraintdef", "pg_get_functiondef", "pg_get_function_arguments",
	"pg_get_function_result", "pg_get_function_identity_arguments", "pg_get_expr",
	"pg_get_userbyid", "pg_get_serial_sequence", "pg_get_ruledef", "pg_get_statisticsobjdef",
	"pg_get_keywords", "pg_get_partkeydef", "obj_description", "col_description",
	"shobj_description", "pg_table_is_visible", "pg_type_is_visible", "pg_function_is_visible",
	"has_table_privilege", "has_column_privilege", "has_schema_privilege",
	"has_database_privilege", "has_function_privilege", "has_sequence_privilege",
	"has_any_column_privilege", "pg_has_role", "pg_size_pretty", "pg_size_bytes",
	"pg_relation_size", "pg_total_relation_size", "pg_table_size", "pg_indexes_size",
	"pg_database_size", "pg_tablespace_size", "pg_column_size", "pg_relation_filenode",
	"pg_relation_filepath", "pg_encoding_max_length", "pg_my_temp_schema",
	"pg_is_other_temp_schema", "pg_jit_available", "pg_trigger_depth", "pg_input_is_valid",
	"pg_input_error_info", "to_regclass", "to_regtype", "to_regproc", "to_regprocedure",
	"to_regnamespace", "to_regrole", "to_regoper", "to_regoperator", "to_regcollation",
	"to_regtypemod", "num_nulls", "num_nonnulls", "pg_collation_for",
	"pg_column_compression", "pg_stat_get_activity",
	"pg_blocking_pids", "pg_safe_snapshot_blocking_pids", "pg_listening_channels",
	"pg_notification_queue_usage", "system_user", "session_user", "current_user",
	"pg_wal_lsn_diff", "pg_lsn", "pg_xact_commit_timestamp", "pg_last_committed_xact",
	"pg_visible_in_snapshot", "pg_xact_status", "txid_visible_in_snapshot", "txid_status",
	"pg_tablespace_location", "pg_options_to_table", "pg_get_object_address",
	"pg_identify_object", "pg_describe_object",

	// Geometry (common ones).
	"area", "center", "diameter", "height", "width", "radius", "npoints", "point", "box",
	"circle", "line", "lseg", "path", "polygon", "isclosed", "isopen",

	// Miscellaneous.
	"uuid_extract_timestamp", "uuid_extract_version", "xmlexists", "xpath", "xpath_exists",
	"xml_is_well_formed", "xml_is_well_formed_document", "xml_is_well_formed_content",
)

func toSet(names ...string) map[string]struct{} {
	m := make(map[string]struct{}, len(names))
	for _, n := range names {
		m[n] = struct{}{}
	}
	return m
}
