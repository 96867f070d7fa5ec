// Measurements in a fresh process: `node worker.mjs '<job json>'` runs the
// job's subjects of one scenario in turn and prints their results as the last
// stdout line. Full runs send one subject per process, which keeps one
// library's JIT state, heap and timers away from the next one's figures;
// smoke runs send them all at once, to be quick.
import { NotBuilt } from './dokebi.mjs';
import { checkPinned, APP_CORE } from './pin.mjs';
import { findScenario } from '../scenarios/index.mjs';

checkPinned('a measuring worker', process.pid, APP_CORE);

const job = JSON.parse(process.argv[2]);
const scenario = findScenario(job.scenario);
const results = [];
for (const subject of job.subjects) {
  try {
    results.push(await scenario.run(subject, job.ctx));
  } catch (error) {
    if (!(error instanceof NotBuilt)) throw error;
    results.push({ skipped: error.message });
  }
}
process.stdout.write('\nRESULT ' + JSON.stringify(results) + '\n');
// Peers keep sockets and timers open; the measurement is over.
process.exit(0);
