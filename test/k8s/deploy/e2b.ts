// The real `e2b` SDK against a runtime it reaches over HTTP, in one sandbox: commands, every file
// call, the missing-path cases, pause and connect (resume), kill. The deploy suite runs it against
// the DEPLOYED runtime (the esbuild bundle in the Deployment, behind a port-forward), so a
// difference between the bundle and the sources the other suites import cannot hide there
// (issue 39: a read of a removed file answered 500 there, where every other suite saw 404).
import { CommandExitError, FileNotFoundError, Sandbox } from "e2b";
import { expect } from "vitest";

export interface SdkTarget {
  /** the runtime's base URL, for both the REST API and the sandbox (envd) API */
  url: string;
  /** an sbx API token, which the E2B layer accepts as the SDK's API key */
  apiKey: string;
}

const sdk = (t: SdkTarget, timeoutMs: number) => ({
  apiKey: t.apiKey,
  apiUrl: t.url,
  sandboxUrl: t.url,
  // a pod start, pause or resume takes seconds on the loaded 2-core machine
  requestTimeoutMs: 150_000,
  timeoutMs,
});

/** commands.run: output, an exit code, a non-zero exit as the SDK's CommandExitError. */
async function commands(s: Sandbox): Promise<void> {
  expect(await s.commands.run("echo out; echo err >&2")).toMatchObject({
    exitCode: 0,
    stdout: "out\n",
    stderr: "err\n",
  });
  const failed = await s.commands.run("echo so far; exit 7").catch((e: unknown) => e);
  expect(failed).toBeInstanceOf(CommandExitError);
  expect(failed).toMatchObject({ exitCode: 7, stdout: "so far\n" });
}

/** write, read, list, exists, makeDir, rename, getInfo, remove: each call once, checked. */
async function files(s: Sandbox, dir: string): Promise<void> {
  expect(await s.files.makeDir(dir)).toBe(true);
  expect(await s.files.makeDir(dir)).toBe(false);
  expect(await s.files.write(`${dir}/notes.txt`, "über deployed\n")).toMatchObject({ path: `${dir}/notes.txt` });
  expect(await s.files.read(`${dir}/notes.txt`)).toBe("über deployed\n");
  expect(await s.files.exists(`${dir}/notes.txt`)).toBe(true);
  expect((await s.files.list(dir)).map((e) => e.name)).toEqual(["notes.txt"]);
  expect(await s.files.getInfo(`${dir}/notes.txt`)).toMatchObject({ name: "notes.txt", type: "file", size: 15 });
  const moved = await s.files.rename(`${dir}/notes.txt`, `${dir}/moved.txt`);
  expect(moved).toMatchObject({ path: `${dir}/moved.txt`, type: "file" });
  expect(await s.files.exists(`${dir}/notes.txt`)).toBe(false);
  expect(await s.files.read(`${dir}/moved.txt`)).toBe("über deployed\n");
  await s.files.remove(`${dir}/moved.txt`);
  expect(await s.files.exists(`${dir}/moved.txt`)).toBe(false);
}

/**
 * A missing path is the SDK's FileNotFoundError (a NotFoundError: HTTP 404 for read, Connect's
 * not_found for getInfo and list), never a 500; the removed file first, the case issue 39 saw
 * fail. remove of a missing path succeeds, as envd's (os.RemoveAll) does.
 */
async function missing(s: Sandbox, dir: string): Promise<void> {
  const never = `${dir}/never.txt`;
  const cases: [string, () => Promise<unknown>, string][] = [
    ["read of a removed file", () => s.files.read(`${dir}/moved.txt`), "FileNotFoundError"],
    ["read of a file that never was", () => s.files.read(never), "FileNotFoundError"],
    ["getInfo", () => s.files.getInfo(never), "FileNotFoundError"],
    ["list", () => s.files.list(`${dir}/never`), "FileNotFoundError"],
    ["exists", async () => ((await s.files.exists(never)) ? "true" : "false"), "resolved false"],
    ["remove", () => s.files.remove(never), "resolved undefined"],
  ];
  const got: Record<string, string> = {};
  for (const [what, call] of cases) {
    got[what] = await call().then(
      (v) => `resolved ${v}`,
      (e: unknown) => (e instanceof FileNotFoundError ? "FileNotFoundError" : `${(e as Error)?.name}: ${String(e)}`),
    );
  }
  expect(got).toEqual(Object.fromEntries(cases.map(([what, , want]) => [what, want])));
}

/**
 * The whole story in one sandbox: create, commands, files, missing paths, pause, connect
 * (resumes) and read a file back through both the file API and a command, kill.
 */
export async function e2bStory(t: SdkTarget): Promise<void> {
  const s = await Sandbox.create("base", sdk(t, 600_000));
  try {
    await commands(s);
    const dir = "/workspace/e2b";
    await files(s, dir);
    await missing(s, dir);
    await s.files.write(`${dir}/kept.txt`, "kept across pause\n");
    expect(await s.pause()).toBe(true);
    expect((await s.getInfo()).state).toBe("paused");
    const again = await Sandbox.connect(s.sandboxId, sdk(t, 300_000));
    expect((await again.getInfo()).state).toBe("running");
    expect(await again.files.read(`${dir}/kept.txt`)).toBe("kept across pause\n");
    expect((await again.commands.run(`cat ${dir}/kept.txt`)).stdout).toBe("kept across pause\n");
    expect(await again.kill()).toBe(true);
    expect(await Sandbox.kill(s.sandboxId, sdk(t, 0))).toBe(false); // gone
  } finally {
    await s.kill().catch(() => undefined);
  }
}
