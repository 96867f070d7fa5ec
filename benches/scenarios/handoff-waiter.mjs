// The other process of the hand-off scenario: on "acquire" it starts waiting
// for the key the holder has, reports "granted" with the CLOCK_MONOTONIC time
// the lease arrived, and releases on "release".
import { mailbox } from '../lib/ipc.mjs';
import { nowNs } from '../lib/stats.mjs';

// The family ('redis', 'postgres', 'mysql' or 'file'), the subject, and the
// JSON of what its factory takes: for redis a URL or a mapping for ours (a
// cluster), for postgres and mysql the URL, for file the directory.
const [family, subject, argument] = process.argv.slice(2);
const { [`${family}Subjects`]: subjects } = await import(`./${family}-subjects.mjs`);
const s = await subjects[subject](JSON.parse(argument));
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
