package health

import (
	"math"
	"time"
)

// Sample is one observation of a route primary's WAL position: at time At
// (the start of the probe that read it) the primary had written no further
// than LSN, and by the end of that probe at least that far.
type Sample struct {
	At  time.Time
	LSN uint64
}

// Bounds of the primary history a Checker keeps per route. A standby further
// behind than the history reaches has an unknown LagMS (see EstimateLag).
// Samples of an idle primary collapse (see appendSample), so the count
// bounds only a busy one: 1024 samples are 34 minutes at the default 2 s
// interval and 10 s at the 10 ms of back-to-back hurried probes.
const (
	historyWindow = 2 * time.Minute
	historyMax    = 1024
)

// EstimateLag returns how far a standby whose replay position is replay
// is behind the primary, as of now, given samples of the primary's position
// (oldest first, At and LSN non-decreasing) that were taken before now:
//
//   - bytes is the latest sample's LSN − replay, at least 0.
//   - ms is 0 when replay ≥ the latest sample's LSN: the standby has
//     replayed everything the primary is known to have written, however
//     long ago that was, so an idle pair is never lagging. Otherwise it is
//     now − At of the newest sample whose LSN ≤ replay, rounded up to the
//     millisecond: the primary was still at or before the standby's
//     position then, so the oldest write the standby lacks is younger. It is
//     an upper bound, too high by at most the gap between that sample and
//     the next, one probe interval: lag errs towards "more", never hides.
//   - both are -1 (unknown) with no samples or replay 0 (unknown), and ms
//     is -1 when every sample is already past replay: the history does not
//     reach back to the standby's position, so nothing bounds the lag from
//     above (now − the oldest sample would be a lower bound, and a far
//     behind standby would look fresh for a while after a restart).
//
// For example, with samples 0/100 at 12:00:00, 0/200 at 12:00:02 and 0/200
// at 12:00:04 (idle since), and now = 12:00:05:
//
//	replay 0/200 → bytes 0,     ms 0     (caught up, idle or not)
//	replay 0/300 → bytes 0,     ms 0     (ahead of the samples)
//	replay 0/180 → bytes 0x80,  ms 5000  (last known at or before 0/180 at 12:00:00)
//	replay 0/100 → bytes 0x100, ms 5000
//	replay 0/80  → bytes 0x180, ms -1    (behind all the history)
//	replay 0     → bytes -1,    ms -1
func EstimateLag(history []Sample, replay uint64, now time.Time) (bytes, ms int64) {
	if len(history) == 0 || replay == 0 {
		return -1, -1
	}
	latest := history[len(history)-1].LSN
	if replay >= latest {
		return 0, 0
	}
	bytes = int64(min(latest-replay, math.MaxInt64))
	// The newest sample at or before replay; LSNs are non-decreasing.
	lo, hi := 0, len(history) // answer in [lo, hi): first index with LSN > replay
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if history[mid].LSN <= replay {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return bytes, -1
	}
	d := now.Sub(history[lo-1].At)
	if d <= 0 {
		// Sampled at or after now and still not past replay: not behind
		// as of now. (Callers pass samples taken before now.)
		return bytes, 0
	}
	return bytes, int64((d + time.Millisecond - 1) / time.Millisecond)
}

// appendSample adds s to history (oldest first) and returns it, keeping
// what EstimateLag needs within historyWindow and historyMax:
//
//   - A run of samples with the same LSN keeps its first and last: the
//     last is when the primary was still there (what EstimateLag uses),
//     the first keeps "it was already there then" for a standby behind the
//     run. An idle primary thus costs two samples, however long it idles.
//   - Samples older than historyWindow before s, and the oldest beyond
//     historyMax, are dropped.
//
// seen runs parallel to history: when each sample was recorded, which the
// Checker compares with standby probe times. The caller resets the history
// when the LSN goes backwards (another server, or a rewound one).
func appendSample(history []Sample, seen []time.Time, s Sample, recorded time.Time) ([]Sample, []time.Time) {
	n := len(history)
	if n >= 2 && history[n-1].LSN == s.LSN && history[n-2].LSN == s.LSN {
		history[n-1], seen[n-1] = s, recorded
	} else {
		history, seen = append(history, s), append(seen, recorded)
	}
	drop := 0
	for drop < len(history)-1 && (s.At.Sub(history[drop].At) > historyWindow || len(history)-drop > historyMax) {
		drop++
	}
	if drop > 0 {
		history = append(history[:0], history[drop:]...)
		seen = append(seen[:0], seen[drop:]...)
	}
	return history, seen
}

// maxPageHeader is the size of the longest WAL page header
// (SizeOfXLogLongPHD, at the start of a segment; the others are 24 bytes).
const maxPageHeader = 40

// NormalizeInsertLSN maps a primary's pg_current_wal_insert_lsn() to the
// position a standby that has replayed everything reports as
// pg_last_wal_replay_lsn(). They differ when the last record ended exactly
// at a WAL page boundary: the insert position then points past the next
// page's header (24 bytes, 40 at a segment start), while replay stops at the
// boundary. A freshly initialised cluster is in that state (measured on
// PostgreSQL 15: insert 0/3000028, replay 0/3000000), and so is any primary
// whose last record happened to fill its page; compared raw, such an idle
// pair would lag by 24 or 40 bytes until the next write.
//
// A position at most maxPageHeader bytes into a page of walBlockSize bytes
// (current_setting('wal_block_size'), 8192 unless PostgreSQL was built
// otherwise) becomes the page boundary. That never changes a comparison
// with a replay position: no record ends between the boundary and a record
// end in its first 40 bytes, since a record that crosses the boundary
// started before it and any other ends beyond 24+24 bytes. walBlockSize 0
// leaves insert as it is.
func NormalizeInsertLSN(insert, walBlockSize uint64) uint64 {
	if walBlockSize == 0 {
		return insert
	}
	if off := insert % walBlockSize; off > 0 && off <= maxPageHeader {
		return insert - off
	}
	return insert
}
