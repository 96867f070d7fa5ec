// One process of the "processes on 64 keys" file scenario: `tasks` callers
// that each take a random key of `keys` (waiting the subject's way), release
// it, and go on until `ms` passes; reports the pairs done.
import { fileSubjects } from './file-subjects.mjs';

const [subject, dir, tasks, keys, ms] = process.argv.slice(2);
const s = await fileSubjects[subject](JSON.parse(dir));
const end = performance.now() + Number(ms);
let pairs = 0;
const task = async () => {
  while (performance.now() < end) {
    const release = await s.acquire(`k${Math.floor(Math.random() * Number(keys))}`);
    await release();
    pairs++;
  }
};
await Promise.all(Array.from({ length: Number(tasks) }, task));
await s.close();
process.send({ type: 'done', pairs }, () => process.exit(0));
