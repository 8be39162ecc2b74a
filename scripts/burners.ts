import { spawn, type ChildProcess } from 'node:child_process';

/**
 * `n` busy-loop processes (CPU burners) beside a benchmark. Each stops on its own after `ms`, so none
 * outlives a benchmark that dies before it kills them.
 */
export function startBurners(n: number, ms: number): ChildProcess[] {
  return Array.from({ length: n }, () => spawn(process.execPath, ['-e', `const end = Date.now() + ${ms}; while (Date.now() < end) {}`], { stdio: 'ignore' }));
}
