// What the run was measured on, recorded with every result.
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import { pinned } from './pin.mjs';

export function describeMachine() {
  const cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
  const model = /^model name\s*:\s*(.*)$/m.exec(cpuinfo)?.[1] ?? os.cpus()[0]?.model ?? 'unknown';
  const text = (cmd, args) => {
    try { return execFileSync(cmd, args, { encoding: 'utf8' }).trim(); } catch { return 'unknown'; }
  };
  return {
    // Pinned (lib/pin.mjs), this process may use one core: the machine's count.
    nproc: Number(text('nproc', pinned ? ['--all'] : [])),
    cpuModel: model,
    memoryGiB: +(os.totalmem() / 2 ** 30).toFixed(1),
    kernel: os.release(),
    node: process.version,
    redisServer: text('redis-server', ['--version']).split(' ').slice(0, 3).join(' '),
    cc: text('cc', ['--version']).split('\n')[0],
    loadAverageAtStart: os.loadavg().map((x) => +x.toFixed(2)),
  };
}

/** The commit measured, with "+changes" when the checkout differs from it. */
export function describeCommit(dir) {
  try {
    const head = execFileSync('git', ['-C', dir, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['-C', dir, 'status', '--porcelain', '--untracked-files=no'], { encoding: 'utf8' }).trim();
    return dirty ? `${head}+changes` : head;
  } catch {
    return 'unknown';
  }
}
