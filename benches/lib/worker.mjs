// One measurement in a fresh process: `node worker.mjs '<job json>'` runs one
// subject of one scenario and prints its result as the last stdout line.
// A fresh process per measurement keeps one library's JIT state, heap and
// timers away from the next one's figures.
import { NotBuilt } from './dokebi.mjs';
import { findScenario } from '../scenarios/index.mjs';

const job = JSON.parse(process.argv[2]);
let result;
try {
  result = await findScenario(job.scenario).run(job.subject, job.ctx);
} catch (error) {
  if (!(error instanceof NotBuilt)) throw error;
  result = { skipped: error.message };
}
process.stdout.write('\nRESULT ' + JSON.stringify(result) + '\n');
// Peers keep sockets and timers open; the measurement is over.
process.exit(0);
