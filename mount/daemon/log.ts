/**
 * The daemon's log: one line per event, `TIME LEVEL cascade: what`, on stderr or appended to a file.
 * Levels: error (a request failed for a reason that is a bug or the machine's: stacks), warn (something
 * the operator should know: a failed flush, a fallback, fault injection), info (the mount's life: mounted,
 * shutting down, unmounted). Nothing is logged per request at any level. Plain text, not JSON: people
 * and `grep` read it on compute nodes; metrics (--metrics) are the machine-readable side.
 */
import * as fs from 'node:fs';
import { CascadeError } from '../../store/errors';

export const LOG_LEVELS = ['error', 'warn', 'info'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export type LogLine = (line: string, level?: LogLevel) => void;

export interface DaemonLog {
  log: LogLine;
  close(): void;
}

/** A log at `level` (lines below it are dropped) to `file` (appended, mode 0600) or stderr. */
export function createDaemonLog(level: LogLevel = 'info', file?: string): DaemonLog {
  if (!LOG_LEVELS.includes(level)) throw new CascadeError('EINVAL', `--log-level must be one of ${LOG_LEVELS.join(', ')}, not ${JSON.stringify(level)}`);
  const limit = LOG_LEVELS.indexOf(level);
  let fd: number | undefined;
  if (file !== undefined) {
    try {
      fd = fs.openSync(file, 'a', 0o600);
    } catch (e) {
      throw new CascadeError('EINVAL', `--log-file ${file}: ${(e as Error).message}`);
    }
  }
  return {
    log: (line, lineLevel = 'info') => {
      if (LOG_LEVELS.indexOf(lineLevel) > limit) return;
      const text = `${new Date().toISOString()} ${lineLevel.toUpperCase().padEnd(5)} ${line}\n`;
      // Synchronous: a line written just before a crash or an exit must not be lost.
      if (fd !== undefined) fs.writeSync(fd, text);
      else process.stderr.write(text);
    },
    close: () => {
      if (fd !== undefined) fs.closeSync(fd);
      fd = undefined;
    },
  };
}
