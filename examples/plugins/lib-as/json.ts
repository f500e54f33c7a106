// A small JSON reader and writer: enough for the requests a tool receives.

export const enum Kind {
  Null,
  Bool,
  Number,
  String,
  Array,
  Object,
}

export class Value {
  kind: Kind = Kind.Null;
  bool: bool = false;
  num: f64 = 0;
  str: string = "";
  items: Value[] = [];
  keys: string[] = [];

  // get returns the member named key of an object, or null.
  get(key: string): Value | null {
    if (this.kind != Kind.Object) return null;
    for (let i = this.keys.length - 1; i >= 0; i--) {
      if (this.keys[i] == key) return this.items[i];
    }
    return null;
  }
}

// Parser walks UTF-8 bytes. On failure error is set and parsing stops.
export class Parser {
  private p: usize;
  private end: usize;
  private start: usize;
  private depth: i32 = 0;
  error: string = "";

  constructor(ptr: usize, len: usize) {
    this.p = ptr;
    this.start = ptr;
    this.end = ptr + len;
  }

  parse(): Value | null {
    const v = this.value();
    if (v === null) return null;
    this.ws();
    if (this.p != this.end) return this.fail("unexpected data after the JSON value");
    return v;
  }

  private fail(what: string): Value | null {
    if (this.error.length == 0) {
      this.error = what + " at offset " + (this.p - this.start).toString();
    }
    return null;
  }

  private peek(): i32 {
    return this.p < this.end ? <i32>load<u8>(this.p) : -1;
  }

  private ws(): void {
    while (this.p < this.end) {
      const c = load<u8>(this.p);
      if (c != 0x20 && c != 0x09 && c != 0x0a && c != 0x0d) break;
      this.p++;
    }
  }

  private eat(lit: string): bool {
    const n = <usize>lit.length;
    if (this.end - this.p < n) return false;
    for (let i: usize = 0; i < n; i++) {
      if (<i32>load<u8>(this.p + i) != lit.charCodeAt(<i32>i)) return false;
    }
    this.p += n;
    return true;
  }

  private value(): Value | null {
    this.ws();
    const c = this.peek();
    const v = new Value();
    if (c == 0x7b) return this.object();
    if (c == 0x5b) return this.array();
    if (c == 0x22) {
      const s = this.string();
      if (s === null) return null;
      v.kind = Kind.String;
      v.str = s;
      return v;
    }
    if (this.eat("true")) {
      v.kind = Kind.Bool;
      v.bool = true;
      return v;
    }
    if (this.eat("false")) {
      v.kind = Kind.Bool;
      return v;
    }
    if (this.eat("null")) return v;
    if (c == 0x2d || (c >= 0x30 && c <= 0x39)) return this.number();
    return this.fail(c < 0 ? "expected a value" : "unexpected character");
  }

  private nest(): bool {
    this.depth++;
    return this.depth <= 64;
  }

  private object(): Value | null {
    if (!this.nest()) return this.fail("nested too deeply");
    this.p++;
    const v = new Value();
    v.kind = Kind.Object;
    this.ws();
    if (this.eat("}")) {
      this.depth--;
      return v;
    }
    for (;;) {
      this.ws();
      if (this.peek() != 0x22) return this.fail("expected a member name");
      const k = this.string();
      if (k === null) return null;
      this.ws();
      if (!this.eat(":")) return this.fail("expected ':'");
      const m = this.value();
      if (m === null) return null;
      v.keys.push(k);
      v.items.push(m);
      this.ws();
      if (this.eat(",")) continue;
      if (this.eat("}")) {
        this.depth--;
        return v;
      }
      return this.fail("expected ',' or '}'");
    }
  }

  private array(): Value | null {
    if (!this.nest()) return this.fail("nested too deeply");
    this.p++;
    const v = new Value();
    v.kind = Kind.Array;
    this.ws();
    if (this.eat("]")) {
      this.depth--;
      return v;
    }
    for (;;) {
      const m = this.value();
      if (m === null) return null;
      v.items.push(m);
      this.ws();
      if (this.eat(",")) continue;
      if (this.eat("]")) {
        this.depth--;
        return v;
      }
      return this.fail("expected ',' or ']'");
    }
  }

  private digits(): bool {
    const d = this.p;
    while (this.p < this.end) {
      const c = load<u8>(this.p);
      if (c < 0x30 || c > 0x39) break;
      this.p++;
    }
    return this.p > d;
  }

  private number(): Value | null {
    const s = this.p;
    this.eat("-");
    if (!this.digits()) return this.fail("expected a digit");
    if (this.eat(".") && !this.digits()) return this.fail("expected a digit after '.'");
    if (this.eat("e") || this.eat("E")) {
      if (!this.eat("+")) this.eat("-");
      if (!this.digits()) return this.fail("expected an exponent");
    }
    const v = new Value();
    v.kind = Kind.Number;
    v.num = parseFloat(String.UTF8.decodeUnsafe(s, this.p - s));
    return v;
  }

  private hex4(): i32 {
    if (this.end - this.p < 4) return -1;
    let v = 0;
    for (let i = 0; i < 4; i++) {
      const c = <i32>load<u8>(this.p + i);
      let d = -1;
      if (c >= 0x30 && c <= 0x39) d = c - 0x30;
      else if (c >= 0x61 && c <= 0x66) d = c - 0x61 + 10;
      else if (c >= 0x41 && c <= 0x46) d = c - 0x41 + 10;
      if (d < 0) return -1;
      v = (v << 4) | d;
    }
    this.p += 4;
    return v;
  }

  // string decodes a string literal; this.p is on the opening quote.
  private string(): string | null {
    this.p++;
    let out = "";
    let run = this.p; // start of a run of plain bytes
    while (this.p < this.end) {
      const c = load<u8>(this.p);
      if (c == 0x22) {
        out += String.UTF8.decodeUnsafe(run, this.p - run);
        this.p++;
        return out;
      }
      if (c < 0x20) {
        this.fail("control character in string");
        return null;
      }
      if (c != 0x5c) {
        this.p++;
        continue;
      }
      out += String.UTF8.decodeUnsafe(run, this.p - run);
      this.p++;
      const e = this.peek();
      this.p++;
      if (e == 0x22) out += '"';
      else if (e == 0x5c) out += "\\";
      else if (e == 0x2f) out += "/";
      else if (e == 0x62) out += "\b";
      else if (e == 0x66) out += "\f";
      else if (e == 0x6e) out += "\n";
      else if (e == 0x72) out += "\r";
      else if (e == 0x74) out += "\t";
      else if (e == 0x75) {
        const u = this.hex4();
        if (u < 0) {
          this.fail("bad \\u escape");
          return null;
        }
        // UTF-16 units map straight onto an AssemblyScript string; a lone
        // surrogate becomes U+FFFD so the output stays valid UTF-8.
        if (u >= 0xd800 && u < 0xdc00) {
          const save = this.p;
          let lo = -1;
          if (this.eat("\\u")) lo = this.hex4();
          if (lo >= 0xdc00 && lo < 0xe000) {
            out += String.fromCharCode(u, lo);
          } else {
            this.p = save;
            out += "\uFFFD";
          }
        } else if (u >= 0xdc00 && u < 0xe000) {
          out += "\uFFFD";
        } else {
          out += String.fromCharCode(u);
        }
      } else {
        this.p--;
        this.fail("bad escape");
        return null;
      }
      run = this.p;
    }
    this.fail("unterminated string");
    return null;
  }
}

// quote returns s as a JSON string literal.
export function quote(s: string): string {
  let out = '"';
  let run = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    let esc = "";
    if (c == 0x22) esc = '\\"';
    else if (c == 0x5c) esc = "\\\\";
    else if (c == 0x0a) esc = "\\n";
    else if (c == 0x0d) esc = "\\r";
    else if (c == 0x09) esc = "\\t";
    else if (c < 0x20) esc = "\\u00" + (c < 0x10 ? "0" : "") + c.toString(16);
    else continue;
    out += s.substring(run, i) + esc;
    run = i + 1;
  }
  return out + s.substring(run) + '"';
}
