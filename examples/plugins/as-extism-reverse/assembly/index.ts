// reverse: a Looopy tool plugin built with Extism's AssemblyScript PDK.
//
// It speaks the Extism ABI (docs/PLUGIN_ABI.md, "Detection"): it imports
// extism:host/env through @extism/as-pdk and exports describe and call_tool,
// which read JSON input and set JSON output without a status byte; errors go
// through Extism's error_set and a non-zero return.
//
// It also calls a Looopy host function through Extism's host-function
// mechanism: looopy.log, with an Extism memory offset (PLUGIN_ABI.md).
//
// Tool reverse: reverses a text by code points, or the order of its words.

import { Host, Memory } from "@extism/as-pdk";
import { error_set } from "@extism/as-pdk/lib/env";
import { Kind, Parser, Value, quote } from "../../lib-as/json";

const DESCRIBE =
  '{"name":"as-extism-reverse","version":"1.0.0","kind":"tool","tools":[' +
  '{"name":"reverse",' +
  '"description":"Reverses a text by Unicode code points, or reverses the order of its words when words is true.",' +
  '"parameters":{"type":"object","properties":{' +
  '"text":{"type":"string","description":"The text to reverse."},' +
  '"words":{"type":"boolean","description":"Reverse the order of the whitespace-separated words instead of the characters."}},' +
  '"required":["text"],"additionalProperties":false},"idempotent":true}]}';

// looopy.log: level 0 debug, 1 info, 2 warn, 3 error; msg is the offset of
// an Extism memory block holding the text.
@external("looopy", "log")
declare function looopy_log(level: i64, msg: u64): void;

const LOG_INFO: i64 = 1;

function abort(message: string | null, file: string | null, line: u32, column: u32): void {
  unreachable();
}

function output(s: string): void {
  // Host.outputString would use the UTF-16 length; send the UTF-8 bytes.
  Host.output(Uint8Array.wrap(String.UTF8.encode(s)));
}

function fail(code: string, message: string): i32 {
  const e = Memory.allocateString('{"code":' + quote(code) + ',"message":' + quote(message) + "}");
  error_set(e.offset);
  return 1;
}

function toolResult(content: string, isError: bool): i32 {
  output('{"content":' + quote(content) + (isError ? ',"isError":true}' : "}"));
  return 0;
}

export function describe(): i32 {
  output(DESCRIBE);
  return 0;
}

export function call_tool(): i32 {
  const input = Host.input();
  const parser = new Parser(input.dataStart, <usize>input.length);
  const req = parser.parse();
  if (req === null) return fail("bad_input", "tool call request: " + parser.error);
  const call = req.get("call");
  if (call === null || call.kind != Kind.Object) {
    return fail("bad_input", 'tool call request has no "call" object');
  }
  const name = call.get("name");
  if (name === null || name.kind != Kind.String) return fail("bad_input", 'tool call has no "name"');
  if (name.str != "reverse") return fail("unknown_tool", "unknown tool " + quote(name.str));
  let args = call.get("arguments");
  if (args === null || args.kind == Kind.Null) {
    args = new Value();
    args.kind = Kind.Object;
  }
  if (args.kind != Kind.Object) return toolResult("arguments must be a JSON object", true);
  const text = args.get("text");
  if (text === null) return toolResult('missing argument "text"', true);
  if (text.kind != Kind.String) return toolResult('argument "text" must be a string', true);
  let byWords = false;
  const w = args.get("words");
  if (w !== null && w.kind != Kind.Null) {
    if (w.kind != Kind.Bool) return toolResult('argument "words" must be a boolean', true);
    byWords = w.bool;
  }
  const msg = Memory.allocateString("reverse: " + text.str.length.toString() + " UTF-16 units" + (byWords ? ", by words" : ""));
  looopy_log(LOG_INFO, msg.offset);
  msg.free();
  return toolResult(byWords ? reverseWords(text.str) : reverseCodePoints(text.str), false);
}

// reverseCodePoints keeps surrogate pairs together.
function reverseCodePoints(s: string): string {
  const n = s.length;
  const units = new Uint16Array(n);
  let i = 0;
  while (i < n) {
    const hi = s.charCodeAt(i);
    if (hi >= 0xd800 && hi < 0xdc00 && i + 1 < n) {
      const lo = s.charCodeAt(i + 1);
      if (lo >= 0xdc00 && lo < 0xe000) {
        units[n - i - 2] = <u16>hi;
        units[n - i - 1] = <u16>lo;
        i += 2;
        continue;
      }
    }
    units[n - i - 1] = <u16>hi;
    i++;
  }
  return String.UTF16.decode(units.buffer);
}

function isSpace(c: i32): bool {
  return c == 0x20 || c == 0x09 || c == 0x0a || c == 0x0d;
}

function reverseWords(s: string): string {
  const words: string[] = [];
  let start = -1;
  for (let i = 0; i <= s.length; i++) {
    const space = i == s.length || isSpace(s.charCodeAt(i));
    if (space && start >= 0) {
      words.push(s.substring(start, i));
      start = -1;
    } else if (!space && start < 0) {
      start = i;
    }
  }
  words.reverse();
  return words.join(" ");
}
