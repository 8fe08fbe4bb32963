import { describe, expect, it } from "vitest";
import { dispositionOf, type FormPart, MultipartReader } from "./multipart.ts";

const B = "----sbxBoundary7MA4YWxk";
function body(parts: { filename: string; data: Buffer }[]): Buffer {
  const chunks: Buffer[] = [Buffer.from("preamble ignored\r\n")];
  for (const p of parts) {
    chunks.push(Buffer.from(`--${B}\r\nContent-Disposition: form-data; name="file"; filename="${p.filename}"\r\n`));
    chunks.push(Buffer.from("Content-Type: application/octet-stream\r\n\r\n"), p.data, Buffer.from("\r\n"));
  }
  chunks.push(Buffer.from(`--${B}--\r\nepilogue`));
  return Buffer.concat(chunks);
}

async function read(whole: Buffer, chunkSize: number): Promise<{ filename?: string; data: string }[]> {
  const got: { filename?: string; data: Promise<string> }[] = [];
  const reader = new MultipartReader(B, (p: FormPart) => {
    const bufs: Buffer[] = [];
    p.body.on("data", (c: Buffer) => bufs.push(c));
    got.push({
      filename: p.filename,
      data: new Promise((r) => p.body.on("end", () => r(Buffer.concat(bufs).toString()))),
    });
  });
  const done = new Promise<void>((resolve, reject) => reader.on("finish", resolve).on("error", reject));
  for (let i = 0; i < whole.length; i += chunkSize) reader.write(whole.subarray(i, i + chunkSize));
  reader.end();
  await done;
  return Promise.all(got.map(async (g) => ({ filename: g.filename, data: await g.data })));
}

describe("MultipartReader", () => {
  // part bodies that look like delimiters, CRLFs at the edges, an empty part
  const parts = [
    { filename: "/workspace/a b.txt", data: Buffer.from(`\r\n--${B.slice(0, 10)} not quite\r\n`) },
    { filename: "/workspace/empty", data: Buffer.alloc(0) },
    { filename: "/workspace/ü%22q%22%0Aline.txt", data: Buffer.from("x".repeat(3000)) },
  ];
  const expected = [
    { filename: "/workspace/a b.txt", data: parts[0]!.data.toString() },
    { filename: "/workspace/empty", data: "" },
    { filename: '/workspace/ü"q"\nline.txt', data: "x".repeat(3000) },
  ];

  it.each([1, 2, 3, 7, 41, 64, 1000, 1 << 20])("splits parts exactly with %i-byte chunks", async (size) => {
    expect(await read(body(parts), size)).toEqual(expected);
  });

  it("fails a body without its closing delimiter", async () => {
    const whole = body(parts);
    await expect(read(whole.subarray(0, whole.length - 20), 100)).rejects.toThrow("closing boundary");
  });

  it.each([
    ['form-data; name="file"; filename="/a/b"', { name: "file", filename: "/a/b" }],
    ["form-data; name=\"file\"; filename*=UTF-8''%2Fw%2F%C3%BC.txt", { name: "file", filename: "/w/ü.txt" }],
    ['form-data; name="note"', { name: "note", filename: undefined }],
  ])("reads %s", (header, want) => {
    expect(dispositionOf(`\r\nContent-Disposition: ${header}`.slice(2))).toEqual(want);
  });
});
