// A TCP connection to a port inside a local sandbox, through its helper (tools/local-helper/
// port-relay.c): one helper connection per relayed connection. The helper forks a relay per
// connection anyway (as for every exec), which costs about a millisecond and keeps each relayed
// connection's backpressure its own; multiplexing would need flow control per stream in C.
import type net from "node:net";
import { UpstreamError } from "../core/errors.ts";
import { connectUnix, frame } from "./protocol.ts";

/** The helper refused the connection: nothing listens on the port (ECONNREFUSED) or another errno. */
export class PortRefused extends UpstreamError {
  constructor(
    readonly sandboxId: string,
    readonly port: number,
    readonly errno: number,
    detail: string,
  ) {
    super(
      `sandbox ${sandboxId}: nothing accepted a connection on port ${port} inside the sandbox (${detail}); start a server listening on that port (on 127.0.0.1 or 0.0.0.0) first`,
      { id: sandboxId, port, errno, refused: errno === ECONNREFUSED },
    );
  }
}

/** errno the helper reports when nothing listens on the port */
export const ECONNREFUSED = 111;

/**
 * Opens the relay and resolves once the helper connected to the port: the socket is then a plain
 * byte pipe to the server inside. Rejects with PortRefused, or the unix socket's own error (the
 * sandbox is gone).
 */
export async function helperPort(socketPath: string, sandboxId: string, port: number): Promise<net.Socket> {
  const sock = await connectUnix(socketPath);
  return new Promise((resolve, reject) => {
    let head: Buffer = Buffer.alloc(0);
    const fail = (err: Error) => {
      sock.destroy();
      reject(err);
    };
    const onData = (chunk: Buffer) => {
      head = head.length ? Buffer.concat([head, chunk]) : chunk;
      if (head.length < 5) return;
      const len = head.readUInt32BE(1);
      if (head.length < 5 + len) return;
      sock.off("data", onData);
      sock.off("error", fail);
      sock.off("close", onClose);
      sock.pause();
      const type = String.fromCharCode(head[0]);
      if (type !== "C") {
        const [stage, errno, ...rest] = head
          .subarray(5, 5 + len)
          .toString()
          .split(":");
        return fail(new PortRefused(sandboxId, port, Number(errno), `${stage}: ${rest.join(":")}`));
      }
      // bytes the server sent right after the connect (a banner) came in the same chunk
      const rest = head.subarray(5 + len);
      if (rest.length) sock.unshift(rest);
      resolve(sock);
    };
    const onClose = () => fail(new UpstreamError(`sandbox ${sandboxId}: the helper closed the port relay`));
    sock.on("data", onData);
    sock.once("error", fail);
    sock.once("close", onClose);
    sock.write(frame("T", String(port)));
  });
}
