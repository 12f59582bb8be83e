package proxy

import "time"

// A retryable read (a read on a replica, outside a block, that may run
// again elsewhere if the replica fails before any byte of its answer
// reached the client) used to keep the session goroutine waiting for that
// first byte. A client that sends one statement at a time has nothing
// more to say before the answer anyway, so when the session goroutine's
// next step is to wait for the client, it goes there at once and the read
// is held: its placement (what was planned, which servers were tried) is
// kept, and settled when the client sends again (the read is answered by
// then, or lost) or when its replica fails first (linkFailed interrupts
// the wait for the client: wakeHeldLocked). A lost read is placed again
// there, as it would have been at once.

// heldRead is a retryable read whose first byte had not reached the
// client when the session goroutine went to wait for the client.
// Session goroutine only.
type heldRead struct {
	active bool
	l      *link
	p      placement
	own    batch // the unit's messages (p.b points here); the spare buffers when not active
}

// deferRetry holds placement p's read on l instead of waiting for its
// first byte, when the session goroutine is about to wait for the client
// with nothing of it buffered (routeUnit sets mayDefer) and the wait can
// be interrupted (idleIO).
func (ss *session) deferRetry(l *link, p *placement) bool {
	if !ss.mayDefer || !ss.idleIO || ss.r == nil || ss.r.Buffered() > 0 {
		return false
	}
	h := &ss.held
	spare := h.own
	h.own = *p.b
	*p.b = batch{buf: spare.buf[:0], msgs: spare.msgs[:0]}
	h.p = *p
	h.p.b = &h.own
	h.l = l
	h.active = true
	return true
}

// settleHeld waits until the held read is answered or lost; a lost one is
// placed again (elsewhere: its replica is tried). Nothing to do when no
// read is held.
func (ss *session) settleHeld() error {
	h := &ss.held
	if !h.active {
		return nil
	}
	h.active = false
	defer func() {
		h.own.reset()
		h.p = placement{}
		h.l = nil
	}()
	if !ss.awaitFirst(h.l, h.p.b) {
		return nil
	}
	if err := ss.readLostAt(h.l, &h.p); err != nil {
		return err
	}
	b := h.p.b
	l, err := ss.place(&h.p) // (mayDefer is false: it waits, as placeUnit would have)
	if l == nil && err == nil && len(b.msgs) == 1 && b.msgs[0].typ == 'Q' {
		ss.queryNotForwarded()
	}
	return err
}

// watchHeld arranges for the held read's failure to interrupt the wait
// for the client that follows; false means it failed already (settle it
// instead of waiting).
func (ss *session) watchHeld() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	l := ss.held.l
	if l.dead || ss.mu.awaiting != l || ss.mu.answered {
		return !l.dead
	}
	ss.mu.idleWait = true
	return true
}

// unwatchHeld ends watchHeld's arrangement; woken reports that the held
// read's failure interrupted the wait (its deadline is cleared).
func (ss *session) unwatchHeld() (woken bool) {
	ss.mu.Lock()
	woken = ss.mu.heldWoken
	ss.mu.idleWait, ss.mu.heldWoken = false, false
	ss.mu.Unlock()
	if woken {
		ss.conn.SetReadDeadline(time.Time{})
	}
	return woken
}

// wakeHeldLocked interrupts the session goroutine's wait for the client
// (watchHeld) because the held read's replica failed: the read is to run
// elsewhere now, not when the client next sends something. Callers hold
// ss.mu.
func (ss *session) wakeHeldLocked() {
	if ss.mu.idleWait && !ss.mu.heldWoken {
		ss.mu.heldWoken = true
		ss.conn.SetReadDeadline(time.Unix(1, 0))
	}
}
