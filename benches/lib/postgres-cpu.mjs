// CPU time of a PostgreSQL server on this host, as the redis scenarios read
// a redis-server's: the postmaster and every backend it runs (from /proc),
// plus what its exited children used (the postmaster's cutime/cstime), so a
// connection opened and closed for each lock is counted too. The postmaster
// is found through the server's own data_directory (postmaster.pid), which
// needs a superuser connection; elsewhere `seconds()` resolves to null.
import { readFileSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { procStat, ticksToSeconds } from './server-cpu.mjs';

const require = createRequire(import.meta.url);

/** The postmaster's pid of the server at `url`, or null. */
async function postmasterOf(url) {
  const { Client } = require('pg');
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query('SHOW data_directory');
    return Number(readFileSync(join(rows[0].data_directory, 'postmaster.pid'), 'utf8').split('\n')[0]);
  } catch {
    return null;
  } finally {
    await client.end();
  }
}

/** { seconds() -> CPU seconds of the server so far, or null }. */
export async function postgresCpu(url) {
  const postmaster = await postmasterOf(url).catch(() => null);
  return {
    seconds() {
      if (postmaster === null) return null;
      const main = procStat(postmaster);
      let ticks = main.utime + main.stime + main.cutime + main.cstime;
      for (const entry of readdirSync('/proc')) {
        if (!/^\d+$/.test(entry) || Number(entry) === postmaster) continue;
        try {
          const child = procStat(entry);
          if (child.ppid === postmaster) ticks += child.utime + child.stime;
        } catch {
          // The process ended between the listing and the read.
        }
      }
      return ticksToSeconds(ticks);
    },
  };
}
