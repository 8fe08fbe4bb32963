// process.Process on top of the Manager's exec: Start runs `cmd args...` (the SDK sends
// /bin/bash -l -c <command>) as an exec session, tracked in the ProcessRegistry so List,
// SendInput, SendSignal, CloseStdin and Connect find it by pid (on Kubernetes from any replica:
// the exec carries the label List reads back, label.ts and processTable.ts). The command outlives the
// request: a client that goes away only detaches; the command ends by itself, by kill, by its
// timeout (Connect-Timeout-Ms, the SDK's timeoutMs, becomes the exec timeout), or with the
// sandbox.
import { PassThrough } from "node:stream";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { ValidationError } from "../../../core/errors.ts";
import { validateTerminalSize } from "../../../core/execInput.ts";
import type { TerminalSize } from "../../../core/types.ts";
import { resolveSandboxPath, userFromAuthorization, validateUser } from "./caller.ts";
import { callerOf, type EnvdServices } from "./context.ts";
import { IDLE, type OutputFeed, type ProcessEnd } from "./feed.ts";
import {
  type Process,
  type ProcessConfig,
  type ProcessEventSchema,
  type PTY,
  Signal,
  type ProcessSelector as WireSelector,
} from "./gen/process/process_pb.ts";
import { encodeProcessLabel } from "./label.ts";
import type { ProcessSelector, ProcessSpec, TrackedProcess } from "./registry.ts";
import { guarded, toConnectError } from "./rpcErrors.ts";

/** the body of both StartResponse and ConnectResponse */
type EventMessage = { event: MessageInitShape<typeof ProcessEventSchema> };

/** The request's process config as a spec; relative cwd is taken from the sandbox home. */
export function processSpecFrom(config: ProcessConfig | undefined, tag: string | undefined): ProcessSpec {
  if (!config || config.cmd === "")
    throw new ValidationError("process.cmd", config?.cmd, "send the program to run, e.g. /bin/bash");
  const spec: ProcessSpec = { cmd: config.cmd, args: [...config.args], envs: { ...config.envs } };
  if (config.cwd !== undefined && config.cwd !== "") spec.cwd = resolveSandboxPath("process.cwd", config.cwd);
  if (tag !== undefined && tag !== "") spec.tag = tag;
  return spec;
}

/** StartRequest.pty / UpdateRequest.pty as a checked window size (0 or 100000 columns: 400) */
export function terminalSizeFrom(pty: PTY): TerminalSize {
  const size = { cols: pty.size?.cols, rows: pty.size?.rows };
  validateTerminalSize(size, "pty.size");
  return size as TerminalSize;
}

function selectorFrom(sel: WireSelector | undefined): ProcessSelector {
  const s = sel?.selector;
  if (s?.case === "pid") return { pid: s.value };
  if (s?.case === "tag") return { tag: s.value };
  throw new ValidationError("process", undefined, "name the process by pid (or tag), as returned by Start");
}

function endMessage(end: ProcessEnd): EventMessage {
  return {
    event: {
      event: {
        case: "end",
        value: { exitCode: end.exitCode, exited: end.exited, status: end.status, error: end.error },
      },
    },
  };
}

/** The events of one attached stream: start, output as produced, keepalives when idle, end. */
async function* events(
  pid: number,
  feed: OutputFeed,
  ctx: HandlerContext,
  keepaliveMs: number,
  pty = false,
): AsyncGenerator<EventMessage> {
  // A client that goes away while this generator waits on a write (connect-node waits for a
  // drain that never comes on a closed response) would keep its feed full and the command's
  // output paused forever: detach on the abort itself, not only when the next read sees it.
  const detach = () => feed.close();
  ctx.signal.addEventListener("abort", detach);
  try {
    yield { event: { event: { case: "start", value: { pid } } } };
    for (;;) {
      const u = await feed.next(ctx.signal, keepaliveMs);
      if (u === undefined) return; // the client went away or its deadline passed: detach only
      if (u === IDLE) {
        yield { event: { event: { case: "keepalive", value: {} } } };
      } else if (u.kind === "data") {
        // a terminal's one merged stream is E2B's `pty` output
        const stream = pty ? "pty" : u.stream;
        yield { event: { event: { case: "data", value: { output: { case: stream, value: u.data } } } } };
      } else {
        if (u.end.timedOut)
          throw new ConnectError(
            `process ${pid} timed out and was killed: pass a larger timeoutMs`,
            Code.DeadlineExceeded,
          );
        yield endMessage(u.end);
        return;
      }
    }
  } finally {
    ctx.signal.removeEventListener("abort", detach);
    feed.close();
  }
}

// Over 60 lines on purpose: the Connect service as one object of its RPC handlers, each a few lines.
export function processService(s: EnvdServices): Partial<ServiceImpl<typeof Process>> {
  const log = s.logger.child({ op: "envd.process" });
  const lookup = async (ctx: HandlerContext, sel: WireSelector | undefined): Promise<TrackedProcess> => {
    const selector = selectorFrom(sel);
    const p = await s.registry.find(callerOf(ctx), selector);
    if (!p) {
      const name = "pid" in selector ? `pid ${selector.pid}` : `tag ${JSON.stringify(selector.tag)}`;
      throw new ConnectError(`process with ${name} not found (it may have exited)`, Code.NotFound);
    }
    return p;
  };

  return {
    async *start(req, ctx) {
      let pid: number;
      let feed: OutputFeed;
      let pty: TerminalSize | undefined;
      try {
        const caller = callerOf(ctx);
        validateUser("authorization", userFromAuthorization(ctx.requestHeader.get("authorization")));
        const spec = processSpecFrom(req.process, req.tag);
        if (req.pty) pty = spec.pty = terminalSizeFrom(req.pty);
        // a terminal always takes input: SendInput with pty bytes is how it is typed into
        const stdin = req.stdin || pty ? new PassThrough() : undefined;
        const session = await s.manager.exec(caller.owner, caller.sandboxId, {
          command: [spec.cmd, ...spec.args],
          env: spec.envs,
          cwd: spec.cwd,
          stdin,
          timeoutMs: ctx.timeoutMs(),
          label: encodeProcessLabel(spec, stdin !== undefined),
          pty,
        });
        // the feed is attached inside add, before any output can have been missed
        const started = await s.registry.add(caller, spec, session, stdin);
        pid = started.process.pid;
        feed = started.feed;
      } catch (err) {
        throw toConnectError(err, log);
      }
      yield* events(pid, feed, ctx, s.keepaliveMs, pty !== undefined);
    },

    async *connect(req, ctx) {
      let pid: number;
      let feed: OutputFeed;
      let pty = false;
      try {
        const p = await lookup(ctx, req.process);
        pid = p.pid;
        pty = p.spec.pty !== undefined;
        feed = await p.follow();
      } catch (err) {
        throw toConnectError(err, log);
      }
      yield* events(pid, feed, ctx, s.keepaliveMs, pty);
    },

    list: (_req, ctx) =>
      guarded(log, async () => ({
        processes: (await s.registry.list(callerOf(ctx))).map((p) => ({
          pid: p.pid,
          tag: p.spec.tag,
          config: { cmd: p.spec.cmd, args: p.spec.args, envs: p.spec.envs, cwd: p.spec.cwd },
        })),
      })),

    sendInput: (req, ctx) =>
      guarded(log, async () => {
        const p = await lookup(ctx, req.process);
        const input = req.input?.input;
        const isPty = p.spec.pty !== undefined;
        // a terminal takes either (what is typed is its stdin); a process on pipes only stdin
        if (input?.case !== "stdin" && !(input?.case === "pty" && isPty))
          throw new ValidationError(
            "input",
            input?.case,
            isPty
              ? "send pty (or stdin) bytes"
              : `process ${p.pid} has no pty: send stdin bytes, or start it with a pty to send pty input`,
          );
        if (!p.hasStdin)
          throw new ConnectError(
            `process ${p.pid} was started without stdin: start it with stdin: true to send input`,
            Code.FailedPrecondition,
          );
        await p.writeStdin(input.value);
        return {};
      }),

    closeStdin: (req, ctx) =>
      guarded(log, async () => {
        await (await lookup(ctx, req.process)).closeStdin();
        return {};
      }),

    sendSignal: (req, ctx) =>
      guarded(log, async () => {
        const p = await lookup(ctx, req.process);
        if (req.signal !== Signal.SIGKILL && req.signal !== Signal.SIGTERM)
          throw new ValidationError("signal", req.signal, "send SIGNAL_SIGKILL or SIGNAL_SIGTERM");
        // both end the whole command at once: the exec layer kills its process group, it
        // cannot deliver a catchable SIGTERM (docs/e2b.md)
        await p.kill();
        return {};
      }),

    update: (req, ctx) =>
      guarded(log, async () => {
        const p = await lookup(ctx, req.process);
        if (!req.pty) return {};
        const size = terminalSizeFrom(req.pty);
        if (!p.resize)
          throw new ConnectError(
            `process ${p.pid} has no pty to resize: start it with a pty (sandbox.pty.create) to resize it`,
            Code.FailedPrecondition,
          );
        await p.resize(size);
        return {};
      }),
  };
}
