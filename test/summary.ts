/**
 * npm test's closing line over its parts (scripts/test.sh): the native core's C++ tests, mocha
 * over every test file, and the mount suites again on fuse-native. Each part prints its own output;
 * this says in one line how all of them went, and fails the run when any did:
 *
 *   cascade tests: native ok (N checks), mocha 700 passing / 0 failing / 11 pending, fuse-native 25 passing / 0 failing / 0 pending — PASS
 *
 * Usage: node dist/test/summary.js PART EXIT FILE [PART EXIT FILE...]; PART is `native` (FILE: its
 * output) or a mocha run's name (FILE: the JSON that test/reporter.ts writes to $CASCADE_TEST_SUMMARY).
 * Exits 0 on PASS, 1 on FAIL.
 */
import * as fs from 'node:fs';

/** What test/reporter.ts writes at the end of a mocha run. */
export interface MochaSummary {
  passes: number;
  failures: number;
  pending: number;
  durationMs: number;
  /** The first failures (test/reporter.ts keeps a bounded few), repeated at the end of npm test. */
  failed?: MochaFailure[];
}

export interface MochaFailure {
  /** The test's full title. */
  title: string;
  /** Its error's stack or message, cut short. */
  error: string;
}

export interface PartResult {
  ok: boolean;
  /** e.g. `native ok (1234 checks)`, `mocha 700 passing / 0 failing / 11 pending` */
  text: string;
  /** Failed tests, by title and error, where the part recorded them. */
  failed?: MochaFailure[];
}

/** The C++ tests (native/test/run.sh): their closing line and exit status. */
export function nativePart(exitCode: number, output: string): PartResult {
  const passed = [...output.matchAll(/^native tests: all (\d+) checks passed$/gm)].pop();
  const failed = [...output.matchAll(/^native tests: (\d+) of (\d+) check\(s\) failed$/gm)].pop();
  if (failed) return { ok: false, text: `native FAIL (${failed[1]} of ${failed[2]} checks failed, exit ${exitCode})` };
  if (exitCode !== 0) return { ok: false, text: `native FAIL (exit ${exitCode}${passed ? ' after its checks passed' : ''})` };
  // Exit 0 without the closing line: the program did not run to its end as written.
  if (!passed) return { ok: false, text: 'native FAIL (exit 0 but no closing line)' };
  return { ok: true, text: `native ok (${passed[1]} checks)` };
}

/** One mocha run: its counts (undefined when it wrote none: it stopped before its end) and exit status. */
export function mochaPart(name: string, exitCode: number, summary: MochaSummary | undefined): PartResult {
  if (summary === undefined) return { ok: false, text: `${name} FAIL (exit ${exitCode} before the end of its run)` };
  const counts = `${summary.passes} passing / ${summary.failures} failing / ${summary.pending} pending`;
  if (summary.failures > 0 || exitCode !== 0) return { ok: false, text: `${name} ${counts} (exit ${exitCode})`, failed: summary.failed ?? [] };
  if (summary.passes === 0) return { ok: false, text: `${name} ${counts}: ran no test` };
  return { ok: true, text: `${name} ${counts}` };
}

/**
 * The failed tests of every part, one block each, for the end of a long log (CI keeps its tail):
 * `[fuse-native] suite title` then the error indented. Empty when nothing recorded a failure.
 */
export function failureReport(parts: { name: string; result: PartResult }[]): string {
  const blocks: string[] = [];
  for (const { name, result } of parts) {
    for (const f of result.failed ?? []) {
      const error = f.error.split('\n').slice(0, 12).map((l) => `    ${l}`).join('\n');
      blocks.push(`  [${name}] ${f.title}\n${error}`);
    }
  }
  return blocks.length === 0 ? '' : `failed tests:\n${blocks.join('\n')}\n`;
}

export function summaryLine(parts: PartResult[]): { ok: boolean; line: string } {
  const ok = parts.length > 0 && parts.every((p) => p.ok);
  return { ok, line: `cascade tests: ${parts.map((p) => p.text).join(', ')} — ${ok ? 'PASS' : 'FAIL'}` };
}

function readMochaSummary(file: string): MochaSummary | undefined {
  let raw: string;
  try {
    raw = fs.readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
  const s = JSON.parse(raw) as MochaSummary;
  for (const k of ['passes', 'failures', 'pending'] as const) if (!Number.isInteger(s[k])) throw new Error(`${file}: no count ${k}`);
  if (s.failed !== undefined && !Array.isArray(s.failed)) throw new Error(`${file}: failed is not a list`);
  return s;
}

function main(argv: string[]): number {
  if (argv.length === 0 || argv.length % 3 !== 0) {
    process.stderr.write('usage: node dist/test/summary.js PART EXIT FILE [PART EXIT FILE...]\n');
    return 2;
  }
  const named: { name: string; result: PartResult }[] = [];
  for (let i = 0; i < argv.length; i += 3) {
    const [name, code, file] = [argv[i], Number(argv[i + 1]), argv[i + 2]];
    if (name === 'native') {
      let output = '';
      try {
        output = fs.readFileSync(file, 'utf8');
      } catch {
        // no output at all: nativePart reports the exit status
      }
      named.push({ name, result: nativePart(code, output) });
    } else {
      named.push({ name, result: mochaPart(name, code, readMochaSummary(file)) });
    }
  }
  process.stdout.write(failureReport(named));
  const { ok, line } = summaryLine(named.map((n) => n.result));
  process.stdout.write(line + '\n');
  return ok ? 0 : 1;
}

if (require.main === module) process.exitCode = main(process.argv.slice(2));
