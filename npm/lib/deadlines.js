// Wait deadlines of one backend with one Node timer, instead of a timer per
// queued acquire: hand-offs under contention then cost no timer work.
//
// Waiters of one wait length join one FIFO list, so each list is ordered by
// deadline; the timer is armed for the earliest head. The timer exists only
// while some waiter waits, so an idle backend keeps nothing alive.
//
// The clock is `performance` as it was when the first of the waiters now
// waiting started: the global is an accessor (Node's lazy attribute), and
// reading it was about a third of a contended hand-off's time spent on the
// clock. Taking it afresh whenever nobody waits keeps fake timers that
// replace `performance` between waits (Jest's, Sinon's) working.

export class Deadlines {
  /** Wait length (ms) -> { head, tail } of waiters linked by deadlinePrev/deadlineNext. */
  #lists = new Map();
  #timer;
  #armedAt = Infinity;
  #onExpired;
  /** The `performance` of the current waiters (see above); undefined while none waits. */
  #clock;

  /** `onExpired(waiter)` runs when a waiter's deadline passes. */
  constructor(onExpired) {
    this.#onExpired = onExpired;
  }

  /** Starts the wait of `waiter`, due `waitMs` from now. */
  add(waiter, waitMs) {
    if (this.#lists.size === 0) this.#clock = performance;
    const deadline = this.#clock.now() + waitMs;
    waiter.deadline = deadline;
    waiter.deadlineMs = waitMs;
    let list = this.#lists.get(waitMs);
    if (list === undefined) {
      list = { head: undefined, tail: undefined };
      this.#lists.set(waitMs, list);
    }
    waiter.deadlinePrev = list.tail;
    waiter.deadlineNext = undefined;
    if (list.tail === undefined) list.head = waiter;
    else list.tail.deadlineNext = waiter;
    list.tail = waiter;
    if (deadline < this.#armedAt) this.#arm(deadline);
  }

  /** Ends the wait of `waiter` (granted, aborted, rejected). */
  remove(waiter) {
    const list = this.#lists.get(waiter.deadlineMs);
    const { deadlinePrev: prev, deadlineNext: next } = waiter;
    if (prev === undefined) list.head = next;
    else prev.deadlineNext = next;
    if (next === undefined) list.tail = prev;
    else next.deadlinePrev = prev;
    waiter.deadlinePrev = waiter.deadlineNext = undefined;
    if (list.head === undefined) {
      this.#lists.delete(waiter.deadlineMs);
      if (this.#lists.size === 0) this.#disarm();
    }
  }

  #arm(deadline) {
    clearTimeout(this.#timer);
    this.#armedAt = deadline;
    this.#timer = setTimeout(() => this.#fire(), Math.max(1, Math.ceil(deadline - this.#clock.now())));
  }

  #disarm() {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#armedAt = Infinity;
    this.#clock = undefined;
  }

  #fire() {
    this.#timer = undefined;
    this.#armedAt = Infinity;
    const now = this.#clock.now();
    const expired = [];
    let next = Infinity;
    for (const list of this.#lists.values()) {
      let waiter = list.head;
      for (; waiter !== undefined && waiter.deadline <= now; waiter = waiter.deadlineNext) {
        // Marked before any expires: one leaving may let another in (local.js refuses it).
        waiter.expired = true;
        expired.push(waiter);
      }
      if (waiter !== undefined) next = Math.min(next, waiter.deadline);
    }
    // Expiring removes each waiter, which may rearm; arm for the rest first.
    if (next !== Infinity) this.#arm(next);
    for (const waiter of expired) this.#onExpired(waiter);
  }
}
