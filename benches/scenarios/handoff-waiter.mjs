// The other process of the hand-off scenario: on "acquire" it starts waiting
// for the key the holder has, reports "granted" with the CLOCK_MONOTONIC time
// the lease arrived, and releases on "release".
import { redisSubjects } from './redis-subjects.mjs';
import { mailbox } from '../lib/ipc.mjs';
import { nowNs } from '../lib/stats.mjs';

// The connection is JSON: a URL, or a mapping for ours (a cluster).
const [subject, connection] = process.argv.slice(2);
const s = await redisSubjects[subject](JSON.parse(connection));
const inbox = mailbox(process);
process.send({ type: 'ready' });
for (;;) {
  const { key } = await inbox.next('acquire');
  const pending = s.acquire(key);
  process.send({ type: 'waiting' });
  let release;
  try {
    release = await pending;
  } catch (error) {
    process.send({ type: 'failed', message: `${error.code ?? error.name}: ${error.message.split('\n')[0]}` });
    continue;
  }
  process.send({ type: 'granted', t1: String(nowNs()) });
  await inbox.next('release');
  await release();
  process.send({ type: 'released' });
}
