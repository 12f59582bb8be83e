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
import java.sql.Statement;
import java.util.Properties;

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
        StringBuilder b = new StringBuilder("{\"client\":").append(quote(CLIENT));
        b.append(",\"op\":").append(quote(op));
        if (tx != null) b.append(",\"tx\":").append(quote(tx));
        if (port != null) b.append(",\"port\":").append(port);
        if (sql != null) b.append(",\"sql\":").append(quote(sql));
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

    public static void main(String[] args) throws Exception {
        String table = System.getenv("COMPAT_TABLE");
        if (table == null || table.isEmpty()) {
            throw new IllegalArgumentException("COMPAT_TABLE is not set");
        }
        String seedEnv = System.getenv("COMPAT_SEED");
        int seedRows = seedEnv == null || seedEnv.isEmpty() ? 50 : Integer.parseInt(seedEnv);
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
