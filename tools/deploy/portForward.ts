// `kubectl port-forward svc/<name>` on loopback, kept open for the demo's lifetime. kubectl
// picks one pod behind the Service when it starts and exits when that pod goes (a rollout, a
// restart), so an unexpected exit starts it again on the same local port.
import { type ChildProcess, spawn } from "node:child_process";

export interface PortForwardOptions {
  kubectl: string;
  kubeconfig: string;
  namespace: string;
  /** e.g. `svc/sbx-manager` */
  target: string;
  remotePort: number;
  /** local port; 0 lets kubectl pick a free one */
  localPort?: number;
  /** how long kubectl may take to report the forward (default 60 s: a busy 2-core machine) */
  startTimeoutMs?: number;
  log: (line: string) => void;
}

export interface PortForward {
  port: number;
  url: string;
  stop(): Promise<void>;
}

/** The local port from kubectl's "Forwarding from 127.0.0.1:<port> -> <remote>" line. */
export function forwardedPort(output: string): number | undefined {
  const m = /Forwarding from 127\.0\.0\.1:(\d+) ->/.exec(output);
  return m ? Number(m[1]) : undefined;
}

function startOnce(o: PortForwardOptions, localPort: number): Promise<{ child: ChildProcess; port: number }> {
  const child = spawn(
    o.kubectl,
    [
      `--kubeconfig=${o.kubeconfig}`,
      "-n",
      o.namespace,
      "port-forward",
      "--address=127.0.0.1",
      o.target,
      `${localPort || ""}:${o.remotePort}`,
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let out = "";
  const collect = (c: Buffer) => {
    out = (out + c.toString()).slice(-4000);
  };
  child.stdout?.on("error", () => undefined);
  child.stderr?.on("error", () => undefined);
  child.stderr?.on("data", collect);
  return new Promise((resolve, reject) => {
    const fail = (why: string) => {
      clearTimeout(timer);
      child.kill("SIGKILL");
      reject(new Error(`kubectl port-forward ${o.target} ${why}: ${out.trim() || "(no output)"}`));
    };
    const timer = setTimeout(() => fail("did not report a port in time"), o.startTimeoutMs ?? 60_000);
    const onError = (err: Error) => fail(`could not start (${err.message})`);
    const onExit = (code: number | null) => fail(`exited (code ${code})`);
    child.once("error", onError);
    child.once("exit", onExit);
    let reported = false;
    child.stdout?.on("data", (c: Buffer) => {
      collect(c);
      const port = forwardedPort(out);
      // kubectl prints a line per address (127.0.0.1, then [::1]), maybe in two chunks
      if (port === undefined || reported) return;
      reported = true;
      clearTimeout(timer);
      // only our own listeners: the caller's exit watch is added after this
      child.off("exit", onExit);
      child.off("error", onError);
      child.on("error", () => undefined); // a later kill of an exited child must not throw
      resolve({ child, port });
    });
  });
}

export async function startPortForward(o: PortForwardOptions): Promise<PortForward> {
  let stopping = false;
  let current = await startOnce(o, o.localPort ?? 0);
  const port = current.port;
  const watch = (child: ChildProcess) =>
    child.once("exit", (code) => {
      if (stopping) return;
      o.log(`sbx demo: the port-forward exited (code ${code}); starting it again on ${port}`);
      const again = (): unknown =>
        stopping ||
        startOnce(o, port).then(
          (next) => {
            if (stopping) next.child.kill("SIGTERM");
            current = next;
            watch(next.child);
          },
          (err: Error) => {
            o.log(`sbx demo: ${err.message}; retrying in 2 s`);
            if (!stopping) setTimeout(again, 2_000).unref();
          },
        );
      setTimeout(again, 500).unref();
    });
  watch(current.child);
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    stop: () => {
      stopping = true;
      const { child } = current;
      if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
      return new Promise<void>((resolve) => {
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
      });
    },
  };
}
