// slugify: a Looopy tool plugin written in AssemblyScript.
//
// It implements the Looopy ABI directly (docs/PLUGIN_ABI.md), without an SDK:
// exports memory, looopy_abi_v1, looopy_alloc and looopy_call, and imports
// nothing (abort is routed to a trap).
//
// Tools:
//   slugify: "Héllo, Wörld!" -> "hello-world"
//   case:    "parse HTTPResponse code" -> "parse_http_response_code" (snake),
//            "parseHttpResponseCode" (camel), and more styles.

import { Kind, Parser, Value, quote } from "../../lib-as/json";

const OP_DESCRIBE = 0;
const OP_TOOL_CALL = 1;

// ---------------------------------------------------------------------------
// Memory handed to the host. Globals are GC roots: a buffer stays alive while
// a global refers to it.

// Buffers from looopy_alloc, kept until the end of the next looopy_call.
const pending: ArrayBuffer[] = [];
// The output of the last call, kept until the next call.
let output = new ArrayBuffer(0);

export function looopy_abi_v1(): void {}

export function looopy_alloc(size: i32): usize {
  if (size < 0) return 0;
  const b = new ArrayBuffer(size);
  pending.push(b);
  return changetype<usize>(b);
}

export function looopy_call(op: i32, ptr: usize, len: i32): u64 {
  let status: u8 = 0;
  let body: string;
  if (len < 0) {
    status = 1;
    body = errorJSON("bad_input", "negative input length");
  } else if (op == OP_DESCRIBE) {
    body = DESCRIBE;
  } else if (op == OP_TOOL_CALL) {
    const r = toolCall(ptr, <usize>len);
    status = r.status;
    body = r.body;
  } else {
    status = 1;
    body = errorJSON("unsupported", "slugify is a tool plugin: only describe (0) and tool call (1)");
  }
  pending.length = 0;
  const n = String.UTF8.byteLength(body);
  output = new ArrayBuffer(n + 1);
  const out = changetype<usize>(output);
  store<u8>(out, status);
  String.UTF8.encodeUnsafe(changetype<usize>(body), body.length, out + 1);
  return (<u64>out << 32) | <u64>(n + 1);
}

// abort replaces AssemblyScript's imported env.abort: a failed runtime check
// traps, and the host discards the instance.
function abort(message: string | null, file: string | null, line: u32, column: u32): void {
  unreachable();
}

const DESCRIBE =
  '{"name":"as-slugify","version":"1.0.0","kind":"tool","tools":[' +
  '{"name":"slugify",' +
  '"description":"Turns a text into a URL slug: Latin accents folded to ASCII, lowercase, runs of other characters replaced by the separator.",' +
  '"parameters":{"type":"object","properties":{' +
  '"text":{"type":"string","description":"The text to slugify."},' +
  '"separator":{"type":"string","description":"Joins the words; default \\"-\\"."},' +
  '"maxLength":{"type":"integer","minimum":0,"description":"Cut the slug to at most this many characters at a word boundary; 0 means no limit."}},' +
  '"required":["text"],"additionalProperties":false},"idempotent":true},' +
  '{"name":"case",' +
  '"description":"Splits a text into words (spaces, punctuation, camelCase and acronym boundaries) and joins them in the given style.",' +
  '"parameters":{"type":"object","properties":{' +
  '"text":{"type":"string","description":"The text to convert."},' +
  '"style":{"type":"string","enum":["snake","kebab","camel","pascal","constant","title","lower","upper"]}},' +
  '"required":["text","style"],"additionalProperties":false},"idempotent":true}]}';

class Result {
  constructor(public status: u8, public body: string) {}
}

function errorJSON(code: string, message: string): string {
  return '{"code":' + quote(code) + ',"message":' + quote(message) + "}";
}

function fail(code: string, message: string): Result {
  return new Result(1, errorJSON(code, message));
}

function toolResult(content: string, isError: bool): Result {
  return new Result(0, '{"content":' + quote(content) + (isError ? ',"isError":true}' : "}"));
}

function toolCall(ptr: usize, len: usize): Result {
  const parser = new Parser(ptr, len);
  const req = parser.parse();
  if (req === null) return fail("bad_input", "tool call request: " + parser.error);
  const call = req.get("call");
  if (call === null || call.kind != Kind.Object) {
    return fail("bad_input", 'tool call request has no "call" object');
  }
  const name = call.get("name");
  if (name === null || name.kind != Kind.String) return fail("bad_input", 'tool call has no "name"');
  let args = call.get("arguments");
  if (args === null || args.kind == Kind.Null) {
    args = new Value();
    args.kind = Kind.Object;
  }
  if (name.str != "slugify" && name.str != "case") {
    return fail("unknown_tool", "unknown tool " + quote(name.str));
  }
  if (args.kind != Kind.Object) return toolResult("arguments must be a JSON object", true);
  const text = args.get("text");
  if (text === null) return toolResult('missing argument "text"', true);
  if (text.kind != Kind.String) return toolResult('argument "text" must be a string', true);

  if (name.str == "slugify") {
    let sep = "-";
    const s = args.get("separator");
    if (s !== null && s.kind != Kind.Null) {
      if (s.kind != Kind.String) return toolResult('argument "separator" must be a string', true);
      sep = s.str;
    }
    let max = 0;
    const m = args.get("maxLength");
    if (m !== null && m.kind != Kind.Null) {
      if (m.kind != Kind.Number || m.num < 0 || m.num != Math.floor(m.num) || m.num > 1e9) {
        return toolResult('argument "maxLength" must be a non-negative integer', true);
      }
      max = <i32>m.num;
    }
    return toolResult(slugify(text.str, sep, max), false);
  }
  {
    const style = args.get("style");
    if (style === null || style.kind != Kind.String) {
      return toolResult('argument "style" must be a string', true);
    }
    const out = changeCase(text.str, style.str);
    if (out === null) {
      return toolResult(
        "unknown style " + quote(style.str) + ": use snake, kebab, camel, pascal, constant, title, lower or upper",
        true,
      );
    }
    return toolResult(out, false);
  }
}

// ---------------------------------------------------------------------------
// Text.

// LATIN1 folds U+00C0..U+00FF to ASCII, one entry per code point, "|"
// separated; an empty entry (× and ÷) is not a letter.
const LATIN1 =
  "A|A|A|A|A|A|AE|C|E|E|E|E|I|I|I|I|D|N|O|O|O|O|O||O|U|U|U|U|Y|TH|ss|" +
  "a|a|a|a|a|a|ae|c|e|e|e|e|i|i|i|i|d|n|o|o|o|o|o||o|u|u|u|u|y|th|y";

// fold returns the ASCII letters or digits a code unit stands for, or "" for
// anything that separates words.
function fold(c: i32): string {
  if ((c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a)) {
    return String.fromCharCode(c);
  }
  if (c >= 0xc0 && c <= 0xff) {
    let idx = c - 0xc0;
    let start = 0;
    while (idx > 0) {
      start = LATIN1.indexOf("|", start) + 1;
      idx--;
    }
    let end = LATIN1.indexOf("|", start);
    if (end < 0) end = LATIN1.length;
    return LATIN1.substring(start, end);
  }
  if (c == 0x152) return "OE";
  if (c == 0x153) return "oe";
  if (c == 0x141) return "L";
  if (c == 0x142) return "l";
  return "";
}

function isUpper(c: i32): bool {
  return c >= 0x41 && c <= 0x5a;
}
function isLower(c: i32): bool {
  return c >= 0x61 && c <= 0x7a;
}

// words splits text at separators, at a lower-to-upper change ("parseJson")
// and before the last capital of an acronym followed by lowercase
// ("HTTPServer" -> "HTTP", "Server").
function words(text: string): string[] {
  // Fold into a buffer of UTF-16 units: ASCII letters and digits as they
  // are, Latin letters to ASCII, anything else to a space. Folding never
  // makes a unit more than two.
  const buf = new Uint16Array(text.length * 2);
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if ((c >= 0x30 && c <= 0x39) || isUpper(c) || isLower(c)) {
      buf[n++] = <u16>c;
      continue;
    }
    let f = c < 0xc0 ? "" : fold(c);
    if (f.length == 0) {
      buf[n++] = 0x20;
      continue;
    }
    // A capital that folds to two letters (Œ, Æ, Þ) is title case before
    // lowercase ("Œuvre" -> "Oeuvre"), so it does not split the word.
    if (f.length > 1 && isUpper(f.charCodeAt(1)) && i + 1 < text.length) {
      const next = fold(text.charCodeAt(i + 1));
      if (next.length > 0 && isLower(next.charCodeAt(0))) f = f.substring(0, 1) + f.substring(1).toLowerCase();
    }
    for (let k = 0; k < f.length; k++) buf[n++] = <u16>f.charCodeAt(k);
  }
  const folded = String.UTF16.decodeUnsafe(buf.dataStart, <usize>n << 1);
  const out: string[] = [];
  let start = -1; // start of the current word, -1 between words
  for (let i = 0; i < folded.length; i++) {
    const c = folded.charCodeAt(i);
    if (c == 0x20) {
      if (start >= 0) out.push(folded.substring(start, i));
      start = -1;
      continue;
    }
    if (start >= 0 && isUpper(c)) {
      const prev = folded.charCodeAt(i - 1);
      const next = i + 1 < folded.length ? folded.charCodeAt(i + 1) : 0;
      if (isLower(prev) || (isUpper(prev) && isLower(next))) {
        out.push(folded.substring(start, i));
        start = i;
      }
    }
    if (start < 0) start = i;
  }
  if (start >= 0) out.push(folded.substring(start));
  return out;
}

function capitalize(w: string): string {
  return w.substring(0, 1).toUpperCase() + w.substring(1).toLowerCase();
}

function slugify(text: string, sep: string, max: i32): string {
  const ws = words(text);
  const out: string[] = [];
  let n = 0; // length of the slug so far
  for (let i = 0; i < ws.length; i++) {
    const w = ws[i].toLowerCase();
    const next = out.length == 0 ? w.length : n + sep.length + w.length;
    if (max > 0 && next > max) {
      if (out.length == 0) out.push(w.substring(0, max)); // one long word: cut it
      break;
    }
    out.push(w);
    n = next;
  }
  return out.join(sep);
}

function changeCase(text: string, style: string): string | null {
  const ws = words(text);
  let sep = "";
  if (style == "snake" || style == "constant") sep = "_";
  else if (style == "kebab") sep = "-";
  else if (style == "title" || style == "lower" || style == "upper") sep = " ";
  else if (style != "camel" && style != "pascal") return null;
  for (let i = 0; i < ws.length; i++) {
    const w = ws[i];
    if (style == "constant" || style == "upper") ws[i] = w.toUpperCase();
    else if (style == "pascal" || style == "title" || (style == "camel" && i > 0)) ws[i] = capitalize(w);
    else ws[i] = w.toLowerCase();
  }
  return ws.join(sep);
}
