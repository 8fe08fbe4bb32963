// The envd half of the E2B layer against the real, unmodified SDK, on the local platform (real
// bubblewrap sandboxes): commands (run, streaming, background processes by pid) and files. The
// SDK is pointed at the in-process service by options (apiUrl/sandboxUrl), never by env, so
// nothing leaks into other test files.
import { createHash, randomBytes } from "node:crypto";
import { CommandExitError, FileNotFoundError, InvalidArgumentError, Sandbox, TimeoutError } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalRuntime, startLocalRuntime, TOKENS } from "../support/local.ts";

let rt: LocalRuntime;
let sbx: Sandbox;

beforeAll(async () => {
  rt = await startLocalRuntime({ budget: { cpu: "8", memory: "16Gi" } });
  const url = await rt.app.listen({ host: "127.0.0.1", port: 0 });
  sbx = await Sandbox.create("base", { apiKey: TOKENS.alice, apiUrl: url, sandboxUrl: url, timeoutMs: 600_000 });
}, 120_000);

afterAll(async () => {
  await sbx?.kill().catch(() => undefined);
  await rt?.close();
});

const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

describe("commands.run", () => {
  it("returns stdout, stderr and the exit code of /bin/bash -l -c", async () => {
    const r = await sbx.commands.run('echo out; echo err >&2; echo "$0"');
    expect(r).toMatchObject({ exitCode: 0, stdout: "out\n/bin/bash\n", stderr: "err\n" });
  });

  it("throws CommandExitError with the code and output on a non-zero exit", async () => {
    const err = await sbx.commands.run("echo partial; echo bad >&2; exit 3").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CommandExitError);
    expect(err).toMatchObject({ exitCode: 3, stdout: "partial\n", stderr: "bad\n" });
  });

  it("applies per-command envs and cwd (absolute, and relative to the home /workspace)", async () => {
    await sbx.files.makeDir("/workspace/sub dir");
    const env = { GREETING: "hello 'quoted' $world", EMPTY: "" };
    const abs = await sbx.commands.run('printf "%s|%s|" "$GREETING" "${EMPTY-unset}"; pwd', { envs: env, cwd: "/tmp" });
    expect(abs.stdout).toBe("hello 'quoted' $world||/tmp\n");
    const rel = await sbx.commands.run("pwd", { cwd: "sub dir" });
    expect(rel.stdout).toBe("/workspace/sub dir\n");
  });

  it("streams output through onStdout while the command still runs (it waits for a file the test makes)", async () => {
    const gate = `/workspace/gate-${Date.now()}`;
    const seen: string[] = [];
    let opened: Promise<unknown> | undefined;
    const r = await sbx.commands.run(`echo first; while [ ! -e '${gate}' ]; do sleep 0.05; done; echo second`, {
      timeoutMs: 60_000,
      onStdout: (d) => {
        seen.push(d);
        // only output delivered before the end can open the gate the command is waiting on
        if (d.includes("first") && !opened) opened = sbx.files.write(gate, "");
      },
    });
    await opened;
    expect(seen.join("")).toBe("first\nsecond\n");
    expect(r.stdout).toBe("first\nsecond\n");
  });

  it("kills a command at its timeoutMs with the SDK's TimeoutError", async () => {
    const err = await sbx.commands.run("sleep 30", { timeoutMs: 1000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TimeoutError);
    // the exec layer kills it at the same deadline; it leaves the process table once it is gone
    await expect
      .poll(async () => (await sbx.commands.list()).some((p) => p.args.includes("sleep 30")), { timeout: 15_000 })
      .toBe(false);
  });

  it("refuses an unknown user with InvalidArgumentError naming it", async () => {
    const err = await sbx.commands.run("true", { user: "mallory" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(String((err as Error).message)).toContain('"mallory"');
    expect((await sbx.commands.run("true", { user: "root" })).exitCode).toBe(0);
  });
});

describe("background commands by pid", () => {
  it("list, sendStdin, connect after disconnect, kill", async () => {
    const out: string[] = [];
    const h = await sbx.commands.run("cat", { background: true, stdin: true, onStdout: (d) => void out.push(d) });
    const listed = await sbx.commands.list();
    expect(listed.find((p) => p.pid === h.pid)).toMatchObject({ cmd: "/bin/bash", args: ["-l", "-c", "cat"] });

    await sbx.commands.sendStdin(h.pid, "one\n");
    await expect.poll(() => out.join(""), { timeout: 20_000 }).toBe("one\n");

    // the request that started it goes away; the command keeps running and is found again
    await h.disconnect();
    const again: string[] = [];
    const h2 = await sbx.commands.connect(h.pid, { onStdout: (d) => void again.push(d) });
    await sbx.commands.sendStdin(h.pid, "two\n");
    await expect.poll(() => again.join(""), { timeout: 20_000 }).toBe("two\n");
    expect(out.join("")).toBe("one\n"); // the disconnected handle saw nothing more

    expect(await sbx.commands.kill(h.pid)).toBe(true);
    await expect(h2.wait()).rejects.toBeInstanceOf(CommandExitError);
    expect(await sbx.commands.kill(h.pid)).toBe(false);
    expect((await sbx.commands.list()).some((p) => p.pid === h.pid)).toBe(false);
  });

  it("closeStdin ends the input: cat exits 0 with what it was sent", async () => {
    const h = await sbx.commands.run("cat; echo done", { background: true, stdin: true });
    await h.sendStdin("last words\n");
    await sbx.commands.closeStdin(h.pid);
    const r = await h.wait();
    expect(r).toMatchObject({ exitCode: 0, stdout: "last words\ndone\n" });
  });

  it("a command started without stdin refuses input, and its stdin is at its end", async () => {
    const h = await sbx.commands.run("cat; sleep 30", { background: true });
    const err = await sbx.commands.sendStdin(h.pid, "x").catch((e: unknown) => e);
    expect(String((err as Error).message)).toContain("started without stdin");
    expect(await h.kill()).toBe(true);
  });
});

describe("files", () => {
  it("round-trips text and 1 MiB of binary (SHA-256)", async () => {
    await sbx.files.write("/workspace/notes.txt", "héllo\nwörld\n");
    expect(await sbx.files.read("/workspace/notes.txt")).toBe("héllo\nwörld\n");
    await sbx.files.write("/workspace/empty.txt", "");
    expect(await sbx.files.read("/workspace/empty.txt")).toBe("");
    const bin = randomBytes(1024 * 1024);
    await sbx.files.write("/workspace/blob.bin", bin.buffer.slice(bin.byteOffset, bin.byteOffset + bin.length));
    const back = await sbx.files.read("/workspace/blob.bin", { format: "bytes" });
    expect(back.length).toBe(bin.length);
    expect(sha256(back)).toBe(sha256(bin));
    const viaShell = await sbx.commands.run("sha256sum /workspace/blob.bin");
    expect(viaShell.stdout.split(" ")[0]).toBe(sha256(bin));
  });

  it("writes the array form to the full paths, creating parents; odd names survive", async () => {
    const names = ["/workspace/deep/er/a b.txt", '/workspace/deep/it\'s "q".txt', "/workspace/ünï/cödé 🚀.txt"];
    const info = await sbx.files.write(names.map((path, i) => ({ path, data: `file ${i}` })));
    expect(info.map((i) => i.path)).toEqual(names);
    for (const [i, path] of names.entries()) expect(await sbx.files.read(path)).toBe(`file ${i}`);
    const newline = "/workspace/new\nline.txt";
    await sbx.files.write(newline, "nl");
    expect(await sbx.files.read(newline)).toBe("nl");
    expect((await sbx.files.list("/workspace")).map((e) => e.name)).toContain("new\nline.txt");
  });

  it("list (with depth), exists, makeDir, rename, remove", async () => {
    expect(await sbx.files.makeDir("/workspace/tree/a")).toBe(true);
    expect(await sbx.files.makeDir("/workspace/tree/a")).toBe(false);
    await sbx.files.write("/workspace/tree/a/f.txt", "x");
    await sbx.files.write("/workspace/tree/top.txt", "yy");

    const one = await sbx.files.list("/workspace/tree");
    expect(one.map((e) => [e.name, e.type]).sort()).toEqual([
      ["a", "dir"],
      ["top.txt", "file"],
    ]);
    expect(one.find((e) => e.name === "top.txt")).toMatchObject({ path: "/workspace/tree/top.txt", size: 2 });
    const two = await sbx.files.list("/workspace/tree", { depth: 2 });
    expect(two.map((e) => e.path).sort()).toEqual([
      "/workspace/tree/a",
      "/workspace/tree/a/f.txt",
      "/workspace/tree/top.txt",
    ]);

    expect(await sbx.files.exists("/workspace/tree/top.txt")).toBe(true);
    expect(await sbx.files.exists("/workspace/tree/nope")).toBe(false);
    expect(await sbx.files.getInfo("/workspace/tree/a")).toMatchObject({ type: "dir", name: "a" });

    const moved = await sbx.files.rename("/workspace/tree/top.txt", "/workspace/tree/b/moved.txt");
    expect(moved).toMatchObject({ path: "/workspace/tree/b/moved.txt", type: "file" });
    expect(await sbx.files.read("/workspace/tree/b/moved.txt")).toBe("yy");
    expect(await sbx.files.exists("/workspace/tree/top.txt")).toBe(false);

    await sbx.files.remove("/workspace/tree");
    expect(await sbx.files.exists("/workspace/tree")).toBe(false);
  });

  it("a missing file is FileNotFoundError for read and list", async () => {
    await expect(sbx.files.read("/workspace/missing.txt")).rejects.toBeInstanceOf(FileNotFoundError);
    await expect(sbx.files.list("/workspace/missing-dir")).rejects.toBeInstanceOf(FileNotFoundError);
  });
});
