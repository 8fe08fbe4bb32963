// Keystroke echo round trip through the terminal websocket (docs/terminals.md), on the local
// platform: the service in this process on a real socket, a sandbox, and `bash -i` on a pty opened
// the way `sbx shell` opens it (HttpManager.exec with pty: runtime/client/terminal.ts). One sample
// is one key sent as a binary frame until its echo (readline's, through the pty) is back on the
// socket. The baseline, measured in the same run against the same sandbox: a plain /v1 exec round
// trip of `true` (request to exit frame). Prints a JSON document and a table. Asserts nothing.
//
//   npx tsx bench/keystroke.ts [--samples 300] [--execs 50] [--output keystroke.json]
import { writeFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { PassThrough } from "node:stream";
import { HttpManager } from "../runtime/client/http.ts";
import type { ExecSession } from "../runtime/core/types.ts";
import { nearestRank } from "./lib/percentile.ts";
import { serveLocal } from "./lib/serviceProcess.ts";
import { flags, intFlag, runnerEnvironment } from "./lib/target.ts";

const TOKEN = "bench-token-0123456789";
const KILL_LINE = "\x15"; // ^U: readline empties the line, so it never grows long enough to scroll

function summary(ms: number[]) {
  const r = (p: number) => Math.round((nearestRank(ms, p) ?? Number.NaN) * 100) / 100;
  return { n: ms.length, p50: r(50), p95: r(95), p99: r(99), max: r(100) };
}

/** Resolves at the first output that contains `text` from now on. */
function nextOutput(session: ExecSession, text: string): Promise<void> {
  return new Promise((resolve) => {
    let seen = "";
    const on = (c: Buffer) => {
      seen += c.toString();
      if (!seen.includes(text)) return;
      session.stdout.off("data", on);
      resolve();
    };
    session.stdout.on("data", on);
  });
}

async function keystrokes(m: HttpManager, id: string, samples: number): Promise<number[]> {
  const input = new PassThrough();
  const session = await m.exec("bench", id, {
    command: ["bash", "--norc", "--noprofile", "-i"],
    env: { PS1: "$ " },
    stdin: input,
    pty: { cols: 200, rows: 50 },
  });
  session.stdout.resume();
  const ready = nextOutput(session, "ready-0");
  input.write("echo ready-$((1-1))\r");
  await ready;
  const ms: number[] = [];
  for (let i = 0; i < samples; i++) {
    if (i % 50 === 0) {
      // the quotes keep the echo of the typed line from matching: only the command's output does
      const cleared = nextOutput(session, "cleared");
      input.write(`${KILL_LINE}echo cl''eared\r`);
      await cleared;
      await new Promise((r) => setTimeout(r, 20)); // let the prompt's redraw pass
    }
    const key = String.fromCharCode(97 + (i % 26));
    const echoed = nextOutput(session, key);
    const t0 = performance.now();
    input.write(key);
    await echoed;
    ms.push(performance.now() - t0);
  }
  input.write(`${KILL_LINE}exit\r`);
  await session.result;
  return ms;
}

async function execs(m: HttpManager, id: string, n: number): Promise<number[]> {
  const ms: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const s = await m.exec("bench", id, { command: ["true"] });
    s.stdout.resume();
    s.stderr.resume();
    await s.result;
    ms.push(performance.now() - t0);
  }
  return ms;
}

async function main(): Promise<void> {
  const f = flags(process.argv.slice(2));
  const samples = intFlag(f, "samples", 300);
  const execCount = intFlag(f, "execs", 50);
  const service = await serveLocal(TOKEN, "sbx-bench-keystroke-");
  try {
    const m = new HttpManager({ server: service.url, token: TOKEN });
    const { id } = await m.create({ owner: "bench", size: "nano" } as Parameters<HttpManager["create"]>[0]);
    await m.wait("bench", id, { timeoutMs: 120_000 });
    await execs(m, id, 5); // warm: the first execs pay for cold caches
    const keys = await keystrokes(m, id, samples);
    const exec = await execs(m, id, execCount);
    const doc = {
      bench: "keystroke",
      platform: "local",
      environment: runnerEnvironment(),
      keystroke_echo_ms: summary(keys),
      exec_round_trip_ms: summary(exec),
    };
    console.log(JSON.stringify(doc, null, 2));
    const row = (name: string, s: ReturnType<typeof summary>) =>
      `| ${name} | ${s.n} | ${s.p50} | ${s.p95} | ${s.p99} | ${s.max} |`;
    console.log(
      [
        "| measurement (local) | n | p50 ms | p95 ms | p99 ms | max ms |",
        "|---|---|---|---|---|---|",
        row("keystroke echo through the terminal websocket (bash -i on a pty)", doc.keystroke_echo_ms),
        row("baseline: /v1 exec round trip of `true`", doc.exec_round_trip_ms),
      ].join("\n"),
    );
    const out = f.get("output");
    if (out) writeFileSync(out, `${JSON.stringify(doc, null, 2)}\n`);
    await m.kill("bench", id);
  } finally {
    await service.close();
  }
}

await main();
