// Message passing with a forked process: `next(type)` resolves with the next
// message of that type, in arrival order.
export function mailbox(channel) {
  const queued = new Map();
  const waiting = new Map();
  channel.on('message', (msg) => {
    const w = waiting.get(msg.type);
    if (w?.length) w.shift()(msg);
    else queued.set(msg.type, [...(queued.get(msg.type) ?? []), msg]);
  });
  return {
    next(type) {
      const q = queued.get(type);
      if (q?.length) return Promise.resolve(q.shift());
      return new Promise((resolve) => waiting.set(type, [...(waiting.get(type) ?? []), resolve]));
    },
    /** The next message of any of `types`. */
    nextOf(types) {
      return Promise.race(types.map((t) => this.next(t)));
    },
  };
}
