// pgJDBC client mix for pg-kinetic's compatibility tests (test/compat).
//
// Same contract as ../psycopg2/mix.py: connection settings from PGHOST,
// PGPORT, PGUSER, PGPASSWORD, PGDATABASE (or a JDBC URL as the first
// argument), COMPAT_TABLE with seed rows 1..COMPAT_SEED (('seed-i', 10*i)),
// own writes at ids >= 1000, one JSON line per statement with the server's
// inet_server_port(), a final {"op":"done"} line.
//
// pgJDBC always uses the extended protocol. A PreparedStatement executed
// prepareThreshold (default 5) times switches to a named server-side
// statement (S_1, S_2, ...). setReadOnly(true) with autocommit off makes the
// driver start each transaction with BEGIN READ ONLY; with autocommit off the
// driver sends BEGIN in the same batch as the first statement.
//
// Compiled by the test with javac against /usr/share/java/postgresql.jar.
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.regex.Pattern;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;

public final class Mix {
    private static final String CLIENT = "jdbc";

    private final Connection conn;

    private Mix(Connection conn) {
        this.conn = conn;
    }

    /** Checks the first row; returns null when it is right, else what is wrong. */
    private interface Check {
        String check(ResultSet rs) throws Exception;
    }

    /** Binds parameters and executes; the row's last column is inet_server_port(). */
    private interface Exec {
        ResultSet execute() throws Exception;
    }

    private static Check seed(int i) {
        return rs -> {
            String name = rs.getString(1);
            int qty = rs.getInt(2);
            if (!("seed-" + i).equals(name) || qty != 10 * i) {
                return "seed row " + i + " = (" + name + ", " + qty + "), want (seed-" + i + ", " + (10 * i) + ")";
            }
            return null;
        };
    }

    private static Check equals(long want) {
        return rs -> rs.getLong(1) == want ? null : "got " + rs.getLong(1) + ", want " + want;
    }

    private static Check equals(String want) {
        return rs -> want.equals(rs.getString(1)) ? null : "got " + rs.getString(1) + ", want " + want;
    }

    private static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        return b.append('"').toString();
    }

    private static void emit(String op, String tx, Integer port, String sql, String error) {
        emit(op, tx, port, sql, null, error);
    }

    private static void emit(String op, String tx, Integer port, String sql, String value, String error) {
        StringBuilder b = new StringBuilder("{\"client\":").append(quote(CLIENT));
        b.append(",\"op\":").append(quote(op));
        if (tx != null) b.append(",\"tx\":").append(quote(tx));
        if (port != null) b.append(",\"port\":").append(port);
        if (sql != null) b.append(",\"sql\":").append(quote(sql));
        if (value != null && !value.isEmpty()) b.append(",\"value\":").append(quote(value));
        b.append(",\"ok\":").append(error == null);
        if (error != null) b.append(",\"error\":").append(quote(error));
        System.out.println(b.append('}'));
        System.out.flush();
    }

    private static String describe(Exception e) {
        String msg = e.getMessage() == null ? "" : e.getMessage().trim();
        return e.getClass().getSimpleName() + ": " + msg;
    }

    private void run(String op, String tx, Exec exec, Check check) {
        Integer port = null;
        String error;
        try (ResultSet rs = exec.execute()) {
            if (!rs.next()) {
                throw new IllegalStateException("no row");
            }
            port = rs.getInt(rs.getMetaData().getColumnCount());
            error = check.check(rs);
        } catch (Exception e) {
            error = describe(e);
        }
        emit(op, tx, port, null, error);
    }

    private void control(String sql, String tx) {
        String error = null;
        try (Statement st = conn.createStatement()) {
            st.execute(sql);
        } catch (Exception e) {
            error = describe(e);
        }
        emit("control", tx, null, sql, error);
    }

    private void commit(String tx) {
        String error = null;
        try {
            conn.commit();
        } catch (Exception e) {
            error = describe(e);
            try {
                conn.rollback();
            } catch (Exception ignored) {
                // reported through the commit failure
            }
        }
        emit("control", tx, null, "COMMIT", error);
    }

    private static Exec bind(PreparedStatement ps, Object... args) {
        return () -> {
            for (int k = 0; k < args.length; k++) {
                ps.setObject(k + 1, args[k]);
            }
            return ps.executeQuery();
        };
    }

    private void mix(String t, int seedRows) throws Exception {
        PreparedStatement byId = conn.prepareStatement("SELECT name, qty, inet_server_port() FROM " + t + " WHERE id = ?");
        PreparedStatement countSeed = conn.prepareStatement("SELECT count(*), inet_server_port() FROM " + t + " WHERE id <= ?");
        PreparedStatement insert = conn.prepareStatement("INSERT INTO " + t + " (id, name, qty) VALUES (?, ?, 1) RETURNING id, inet_server_port()");
        PreparedStatement update = conn.prepareStatement("UPDATE " + t + " SET qty = qty + 1 WHERE id = ? RETURNING qty, inet_server_port()");
        Statement st = conn.createStatement();

        // Phase A: reads before this session wrote anything.
        control("SET statement_timeout = '31s'", null);
        for (int i = 1; i <= 8; i++) {
            final int id = i;
            // A fresh PreparedStatement each time stays on the unnamed statement.
            run("read", null, () -> {
                PreparedStatement ps = conn.prepareStatement("SELECT name, qty, inet_server_port() FROM " + t + " WHERE id = ?");
                ps.closeOnCompletion();
                ps.setInt(1, id);
                return ps.executeQuery();
            }, seed(i));
        }
        run("read", null, () -> st.executeQuery("SELECT count(*), inet_server_port() FROM " + t + " WHERE id <= " + seedRows), equals(seedRows));
        run("read", null, bind(countSeed, seedRows), equals(seedRows));
        // The same PreparedStatement: server-prepared (S_n) from the 5th execution.
        for (int k = 0; k < 12; k++) {
            int i = k % seedRows + 1;
            run("prepared_read", null, bind(byId, i), seed(i));
        }
        conn.setAutoCommit(false);
        conn.setReadOnly(true);
        for (int i : new int[] {3, 4, 5}) {
            run("tx_read", "ro1", bind(byId, i), seed(i));
        }
        run("tx_read", "ro1", bind(countSeed, seedRows), equals(seedRows));
        commit("ro1");
        conn.setReadOnly(false);
        conn.setAutoCommit(true);
        control("PREPARE compat_by_id(int) AS SELECT name, qty, inet_server_port() FROM " + t + " WHERE id = $1", null);
        for (int i = 1; i <= 5; i++) {
            final int id = i;
            run("sql_prepared_read", null, () -> st.executeQuery("EXECUTE compat_by_id(" + id + ")"), seed(i));
        }
        control("DEALLOCATE compat_by_id", null);
        run("session_read", null, () -> st.executeQuery("SELECT current_setting('statement_timeout'), inet_server_port()"), equals("31s"));

        // Phase B: writes, and reads after them.
        for (int i = 1001; i <= 1005; i++) {
            final int id = i;
            run("write", null, () -> st.executeQuery("INSERT INTO " + t + " (id, name, qty) VALUES (" + id + ", 'own-" + id + "', 1) RETURNING id, inet_server_port()"), equals(i));
        }
        for (int i = 1001; i <= 1003; i++) {
            run("write", null, bind(update, i), equals(2));
        }
        run("write", null, bind(insert, 1006, "own-1006"), equals(1006));
        run("read_after_write", null, bind(byId, 7), seed(7));
        conn.setAutoCommit(false);
        run("tx_write", "rw1", bind(insert, 1010, "own-1010"), equals(1010));
        run("tx_write", "rw1", () -> st.executeQuery("SELECT qty, inet_server_port() FROM " + t + " WHERE id = 1010"), equals(1));
        run("tx_write", "rw1", bind(update, 1010), equals(2));
        commit("rw1");
        conn.setAutoCommit(true);
        // insert has run twice; from here it crosses prepareThreshold.
        for (int i = 1100; i <= 1109; i++) {
            run("prepared_write", null, bind(insert, i, "own-" + i), equals(i));
        }
        for (int i : new int[] {1, 2, 3}) {
            run("read_after_write", null, bind(byId, i), seed(i));
        }
        conn.setAutoCommit(false);
        conn.setReadOnly(true);
        run("tx_read", "ro2", bind(byId, 9), seed(9));
        run("tx_read", "ro2", bind(countSeed, seedRows), equals(seedRows));
        commit("ro2");
        conn.setReadOnly(false);
        run("tx_write", "rw2", () -> st.executeQuery("SELECT count(*), inet_server_port() FROM " + t + " WHERE id >= 1000"), equals(17));
        commit("rw2");
        conn.setAutoCommit(true);
    }

    // Features of ../features_test.go (COMPAT_FEATURE), each on connections
    // of its own (from connect()).

    /** Checks that the rows are seed rows first, first+1, ... (id, name, qty, port). */
    private static String seedRun(List<Object[]> rows, int first) {
        for (int k = 0; k < rows.size(); k++) {
            int i = first + k;
            Object[] r = rows.get(k);
            if (((Number) r[0]).intValue() != i || !("seed-" + i).equals(r[1]) || ((Number) r[2]).intValue() != 10 * i) {
                return "row " + k + " = (" + r[0] + ", " + r[1] + ", " + r[2] + "), want seed row " + i;
            }
        }
        return null;
    }

    /** Returns up to limit rows (id, name, qty, port) from rs; fewer at its end. */
    private static List<Object[]> take(ResultSet rs, int limit) throws SQLException {
        List<Object[]> rows = new ArrayList<>();
        while (rows.size() < limit && rs.next()) {
            rows.add(new Object[] {rs.getInt(1), rs.getString(2), rs.getInt(3), rs.getInt(4)});
        }
        return rows;
    }

    private interface Fetch {
        List<Object[]> fetch() throws Exception;
    }

    /** Calls fetch (7 rows at a time) until it returns no row, checking the seed rows come in order. */
    private static void fetchSteps(String op, String tx, int seedRows, Fetch fetch) {
        int next = 1;
        for (int n = 0; n < seedRows / 7 + 2; n++) {
            List<Object[]> rows;
            try {
                rows = fetch.fetch();
            } catch (Exception e) {
                emit(op + "_fetch", tx, null, null, describe(e));
                return;
            }
            if (rows.isEmpty()) {
                emit(op + "_end", tx, null, null, next == seedRows + 1 ? null : "ended before row " + next);
                return;
            }
            int want = Math.min(7, seedRows - next + 1);
            String error = rows.size() != want ? rows.size() + " rows at row " + next + ", want " + want : seedRun(rows, next);
            emit(op + "_fetch", tx, (Integer) rows.get(0)[3], null, error);
            if (error != null) {
                return;
            }
            next += rows.size();
        }
    }

    private void cursor(String t, int seedRows) throws Exception {
        conn.setAutoCommit(false);
        conn.setReadOnly(true); // BEGIN READ ONLY with the first statement
        control("DECLARE compat_cur CURSOR FOR SELECT id, name, qty, inet_server_port() FROM " + t + " WHERE id <= " + seedRows + " ORDER BY id", "cur");
        try (Statement st = conn.createStatement()) {
            fetchSteps("cursor", "cur", seedRows, () -> {
                try (ResultSet rs = st.executeQuery("FETCH 7 FROM compat_cur")) {
                    return take(rs, Integer.MAX_VALUE);
                }
            });
        }
        control("CLOSE compat_cur", "cur");
        commit("cur");
    }

    /** setFetchSize(7) in a transaction: a named portal, executed 7 rows at a time. */
    private void portal(String t, int seedRows) throws Exception {
        conn.setAutoCommit(false);
        conn.setReadOnly(true);
        try (PreparedStatement ps = conn.prepareStatement("SELECT id, name, qty, inet_server_port() FROM " + t + " WHERE id <= ? ORDER BY id")) {
            ps.setFetchSize(7);
            ps.setInt(1, seedRows);
            try (ResultSet rs = ps.executeQuery()) {
                fetchSteps("portal", "portal", seedRows, () -> take(rs, 7));
            }
        } catch (Exception e) {
            emit("portal_fetch", "portal", null, null, describe(e));
        }
        commit("portal");
    }

    private void listenNotify(String t) throws Exception {
        String channel = "ch_" + t;
        control("LISTEN " + channel, null);
        run("listen_port", null, () -> conn.createStatement().executeQuery("SELECT 'listening', inet_server_port()"), rs -> null);
        try (Connection nconn = connect(new Properties())) {
            Mix notifier = new Mix(nconn);
            notifier.control("NOTIFY " + channel + ", 'payload-1'", null);
            PreparedStatement ps = nconn.prepareStatement("SELECT 'sent', inet_server_port() FROM (SELECT pg_notify(?, ?)) AS n");
            notifier.run("notify", null, bind(ps, channel, "payload-2"), rs -> null);
        }
        PGConnection pg = conn.unwrap(PGConnection.class);
        List<PGNotification> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 10000;
        while (got.size() < 2 && System.currentTimeMillis() < deadline) {
            PGNotification[] ns = pg.getNotifications((int) Math.max(1, deadline - System.currentTimeMillis()));
            if (ns != null) {
                got.addAll(List.of(ns));
            }
        }
        String[] want = {"payload-1", "payload-2"};
        for (int k = 0; k < want.length; k++) {
            if (k >= got.size()) {
                emit("notify_received", null, null, null, "no notification " + want[k] + " within 10 s");
                continue;
            }
            PGNotification n = got.get(k);
            String error = channel.equals(n.getName()) && want[k].equals(n.getParameter()) ? null
                    : "notification " + n.getParameter() + " on " + n.getName() + ", want " + want[k] + " on " + channel;
            emit("notify_received", null, null, null, n.getParameter(), error);
        }
        control("UNLISTEN *", null);
    }

    /** prepareThreshold=0 (the connection's): every execution is Parse/Bind/Execute of the unnamed statement. */
    private void unnamed(String t) throws Exception {
        PreparedStatement byId = conn.prepareStatement("SELECT name, qty, inet_server_port() FROM " + t + " WHERE id = ?");
        PreparedStatement insert = conn.prepareStatement("INSERT INTO " + t + " (id, name, qty) VALUES (?, ?, 1) RETURNING id, inet_server_port()");
        for (int i = 1; i <= 12; i++) {
            run("unnamed_read", null, bind(byId, i), seed(i));
        }
        for (int i = 3000; i <= 3001; i++) {
            run("unnamed_write", null, bind(insert, i, "own-" + i), equals(i));
        }
        for (int k = 0; k < 6; k++) {
            if (k % 2 == 0) {
                run("unnamed_read_after_write", null, bind(byId, k + 1), seed(k + 1));
            } else {
                int own = 3000 + k / 2 % 2;
                run("unnamed_read_after_write", null, bind(byId, own), equals("own-" + own));
            }
        }
    }

    /** Runs sql (extended protocol, like every pgJDBC statement) for its effect; with wantCode it must fail so. */
    private void statement(String op, String sql, String wantCode) {
        String error = null;
        try (Statement st = conn.createStatement()) {
            st.execute(sql);
            if (wantCode != null) {
                error = "succeeded, want SQLSTATE " + wantCode;
            }
        } catch (SQLException e) {
            if (wantCode == null || !wantCode.equals(e.getSQLState())) {
                error = describe(e) + " (SQLSTATE " + e.getSQLState() + ")";
            }
        }
        emit(op, null, null, null, error);
    }

    private String show(String name) throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement("SHOW " + name); ResultSet rs = ps.executeQuery()) {
            if (!rs.next()) {
                throw new IllegalStateException("no row from SHOW " + name);
            }
            return rs.getString(1);
        }
    }

    private void kineticExt(String t) throws Exception {
        PreparedStatement insert = conn.prepareStatement("INSERT INTO " + t + " (id, name, qty) VALUES (?, ?, 1) RETURNING id, inet_server_port()");
        run("kinetic_write", null, bind(insert, 2000, "own-2000"), equals(2000));
        String token = "";
        String error = null;
        try {
            token = show("pg_kinetic.write_lsn");
            String status = conn.unwrap(PGConnection.class).getParameterStatus("pg_kinetic.write_lsn");
            if (!Pattern.matches("[0-9]+:[0-9A-F]+/[0-9A-F]+", token)) {
                error = "pg_kinetic.write_lsn = " + token + ", want TIMELINE:LSN";
            } else if (status != null && !status.equals(token)) {
                error = "SHOW says " + token + ", ParameterStatus " + status;
            }
        } catch (Exception e) {
            error = describe(e);
        }
        emit("kinetic_show_write_lsn", null, null, null, token, error);
        statement("kinetic_set_min_lsn", "SET pg_kinetic.min_lsn = '" + token + "'", null);
        PreparedStatement byId = conn.prepareStatement("SELECT name, qty, inet_server_port() FROM " + t + " WHERE id = ?");
        run("kinetic_read", null, bind(byId, 5), seed(5));
        statement("kinetic_set_invalid", "SET pg_kinetic.min_lsn = 'not-a-token'", "22023");
        run("kinetic_read", null, bind(byId, 6), seed(6));
        String route = "";
        error = null;
        try {
            route = show("pg_kinetic.last_route");
            if (!route.startsWith("target=") || !route.contains(" reason=")) {
                error = "pg_kinetic.last_route = " + route + ", want target=... reason=...";
            }
        } catch (Exception e) {
            error = describe(e);
        }
        emit("kinetic_show_last_route", null, null, null, route, error);
    }

    private static void feature(String name, String table, int seedRows) throws Exception {
        Properties extra = new Properties();
        if (name.equals("unnamed")) {
            extra.setProperty("prepareThreshold", "0");
        }
        try (Connection conn = connect(extra)) {
            Mix m = new Mix(conn);
            switch (name) {
                case "cursor": m.cursor(table, seedRows); break;
                case "portal": m.portal(table, seedRows); break;
                case "listen_notify": m.listenNotify(table); break;
                case "unnamed": m.unnamed(table); break;
                case "kinetic_ext": m.kineticExt(table); break;
                default: throw new IllegalArgumentException("no feature " + name);
            }
        }
    }

    /** A connection with the PG* settings (as main's) plus extra properties. */
    private static Connection connect(Properties extra) throws SQLException {
        String url = "jdbc:postgresql://" + env("PGHOST", "127.0.0.1") + ":" + env("PGPORT", "5432") + "/" + env("PGDATABASE", "postgres");
        Properties props = new Properties();
        props.setProperty("user", env("PGUSER", "postgres"));
        props.setProperty("password", env("PGPASSWORD", ""));
        props.setProperty("sslmode", "disable");
        props.setProperty("ApplicationName", "compat-jdbc");
        props.putAll(extra);
        return DriverManager.getConnection(url, props);
    }

    public static void main(String[] args) throws Exception {
        String table = System.getenv("COMPAT_TABLE");
        if (table == null || table.isEmpty()) {
            throw new IllegalArgumentException("COMPAT_TABLE is not set");
        }
        String seedEnv = System.getenv("COMPAT_SEED");
        int seedRows = seedEnv == null || seedEnv.isEmpty() ? 50 : Integer.parseInt(seedEnv);
        String feature = env("COMPAT_FEATURE", "");
        if (!feature.isEmpty()) {
            feature(feature, table, seedRows);
            emit("done", null, null, null, null);
            return;
        }
        String url = args.length > 0 ? args[0]
                : "jdbc:postgresql://" + env("PGHOST", "127.0.0.1") + ":" + env("PGPORT", "5432") + "/" + env("PGDATABASE", "postgres");
        Properties props = new Properties();
        props.setProperty("user", env("PGUSER", "postgres"));
        props.setProperty("password", env("PGPASSWORD", ""));
        props.setProperty("sslmode", "disable");
        props.setProperty("ApplicationName", "compat-jdbc");
        try (Connection conn = DriverManager.getConnection(url, props)) {
            new Mix(conn).mix(table, seedRows);
        }
        emit("done", null, null, null, null);
    }

    private static String env(String name, String def) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? def : v;
    }
}
