// textstats: a Looopy tool plugin written in C (wasm32-wasi reactor).
//
// It implements the Looopy ABI directly (docs/PLUGIN_ABI.md), without an SDK:
// exports memory, looopy_abi_v1, looopy_alloc and looopy_call, and imports
// one host function, looopy.log.
//
// Tool word_count: counts the words, lines, characters (Unicode code points)
// and bytes of a text.

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT(name) __attribute__((export_name(name)))

__attribute__((import_module("looopy"), import_name("log"))) void
host_log(int32_t level, const char *ptr, int32_t len);

enum { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3 };

enum { OP_DESCRIBE = 0, OP_TOOL_CALL = 1 };

// ---------------------------------------------------------------------------
// Memory handed to the host.
//
// Buffers from looopy_alloc live until the end of the next looopy_call; the
// output of a call lives until the next looopy_call begins.

#define MAX_PENDING 64

static void *pending[MAX_PENDING];
static int npending;
static char *last_output;

EXPORT("looopy_abi_v1") void looopy_abi_v1(void) {}

EXPORT("looopy_alloc") int32_t looopy_alloc(int32_t size) {
  if (size < 0 || npending == MAX_PENDING) {
    return 0;
  }
  void *p = malloc(size > 0 ? (size_t)size : 1);
  if (p != NULL) {
    pending[npending++] = p;
  }
  return (int32_t)(uintptr_t)p;
}

static void free_pending(void) {
  for (int i = 0; i < npending; i++) {
    free(pending[i]);
  }
  npending = 0;
}

// ---------------------------------------------------------------------------
// A growable output buffer.

typedef struct {
  char *data;
  size_t len, cap;
  int failed;
} buf;

static void buf_grow(buf *b, size_t extra) {
  if (b->failed || b->len + extra <= b->cap) {
    return;
  }
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra) {
    cap *= 2;
  }
  char *d = realloc(b->data, cap);
  if (d == NULL) {
    b->failed = 1;
    return;
  }
  b->data = d;
  b->cap = cap;
}

static void buf_put(buf *b, const char *s, size_t n) {
  buf_grow(b, n);
  if (!b->failed) {
    memcpy(b->data + b->len, s, n);
    b->len += n;
  }
}

static void buf_str(buf *b, const char *s) { buf_put(b, s, strlen(s)); }

static void buf_uint(buf *b, uint64_t v) {
  char tmp[24];
  int i = sizeof tmp;
  do {
    tmp[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  buf_put(b, tmp + i, sizeof tmp - (size_t)i);
}

// buf_json_string writes s as a JSON string literal.
static void buf_json_string(buf *b, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  buf_put(b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    switch (c) {
    case '"': buf_put(b, "\\\"", 2); break;
    case '\\': buf_put(b, "\\\\", 2); break;
    case '\n': buf_put(b, "\\n", 2); break;
    case '\r': buf_put(b, "\\r", 2); break;
    case '\t': buf_put(b, "\\t", 2); break;
    default:
      if (c < 0x20) {
        char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        buf_put(b, esc, 6);
      } else {
        buf_put(b, (const char *)&c, 1);
      }
    }
  }
  buf_put(b, "\"", 1);
}

// ---------------------------------------------------------------------------
// A minimal JSON reader: enough to find a member of an object and decode a
// string, validating the parts it walks over.

typedef struct {
  const char *p, *end;
} span;

static void skip_ws(span *s) {
  while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) {
    s->p++;
  }
}

static int skip_value(span *s, int depth);

// skip_string moves past a string literal; s->p is on the opening quote.
static int skip_string(span *s) {
  s->p++;
  while (s->p < s->end) {
    unsigned char c = (unsigned char)*s->p++;
    if (c == '"') {
      return 1;
    }
    if (c < 0x20) {
      return 0;
    }
    if (c == '\\') {
      if (s->p >= s->end) {
        return 0;
      }
      s->p++;
    }
  }
  return 0;
}

static int skip_container(span *s, char close, int depth) {
  int object = close == '}';
  s->p++;
  skip_ws(s);
  if (s->p < s->end && *s->p == close) {
    s->p++;
    return 1;
  }
  for (;;) {
    skip_ws(s);
    if (object) {
      if (s->p >= s->end || *s->p != '"' || !skip_string(s)) {
        return 0;
      }
      skip_ws(s);
      if (s->p >= s->end || *s->p != ':') {
        return 0;
      }
      s->p++;
    }
    if (!skip_value(s, depth + 1)) {
      return 0;
    }
    skip_ws(s);
    if (s->p >= s->end) {
      return 0;
    }
    if (*s->p == ',') {
      s->p++;
      continue;
    }
    if (*s->p == close) {
      s->p++;
      return 1;
    }
    return 0;
  }
}

static int skip_literal(span *s, const char *lit) {
  size_t n = strlen(lit);
  if ((size_t)(s->end - s->p) < n || memcmp(s->p, lit, n) != 0) {
    return 0;
  }
  s->p += n;
  return 1;
}

static int skip_value(span *s, int depth) {
  if (depth > 64) {
    return 0;
  }
  skip_ws(s);
  if (s->p >= s->end) {
    return 0;
  }
  switch (*s->p) {
  case '"': return skip_string(s);
  case '{': return skip_container(s, '}', depth);
  case '[': return skip_container(s, ']', depth);
  case 't': return skip_literal(s, "true");
  case 'f': return skip_literal(s, "false");
  case 'n': return skip_literal(s, "null");
  default: {
    const char *start = s->p;
    while (s->p < s->end && strchr("+-0123456789.eE", *s->p) != NULL) {
      s->p++;
    }
    return s->p > start;
  }
  }
}

// key_equals reports whether the string literal at [p, q) (quotes included)
// is exactly key. Keys with escapes never match: ours have none.
static int key_equals(const char *p, const char *q, const char *key) {
  size_t n = strlen(key);
  return (size_t)(q - p) == n + 2 && memcmp(p + 1, key, n) == 0;
}

// object_get finds member key of the object in obj and returns its value in
// *out. It returns 1 when found, 0 when absent, -1 when obj is not a valid
// object.
static int object_get(span obj, const char *key, span *out) {
  span s = obj;
  skip_ws(&s);
  if (s.p >= s.end || *s.p != '{') {
    return -1;
  }
  s.p++;
  skip_ws(&s);
  if (s.p < s.end && *s.p == '}') {
    return 0;
  }
  for (;;) {
    skip_ws(&s);
    const char *k = s.p;
    if (s.p >= s.end || *s.p != '"' || !skip_string(&s)) {
      return -1;
    }
    const char *kend = s.p;
    skip_ws(&s);
    if (s.p >= s.end || *s.p != ':') {
      return -1;
    }
    s.p++;
    skip_ws(&s);
    const char *v = s.p;
    if (!skip_value(&s, 1)) {
      return -1;
    }
    if (key_equals(k, kend, key)) {
      out->p = v;
      out->end = s.p;
      return 1;
    }
    skip_ws(&s);
    if (s.p >= s.end) {
      return -1;
    }
    if (*s.p == ',') {
      s.p++;
      continue;
    }
    if (*s.p == '}') {
      return 0;
    }
    return -1;
  }
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int read_hex4(const char *p, const char *end, uint32_t *out) {
  if (end - p < 4) {
    return 0;
  }
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexval(p[i]);
    if (h < 0) {
      return 0;
    }
    v = v << 4 | (uint32_t)h;
  }
  *out = v;
  return 1;
}

static void put_utf8(buf *b, uint32_t cp) {
  char u[4];
  size_t n;
  if (cp < 0x80) {
    u[0] = (char)cp;
    n = 1;
  } else if (cp < 0x800) {
    u[0] = (char)(0xC0 | cp >> 6);
    u[1] = (char)(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    u[0] = (char)(0xE0 | cp >> 12);
    u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
    u[2] = (char)(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    u[0] = (char)(0xF0 | cp >> 18);
    u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    u[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    u[3] = (char)(0x80 | (cp & 0x3F));
    n = 4;
  }
  buf_put(b, u, n);
}

// decode_string decodes the JSON string literal v into out (UTF-8).
// It returns 0 when v is not a valid string literal.
static int decode_string(span v, buf *out) {
  const char *p = v.p, *end = v.end;
  if (p >= end || *p != '"') {
    return 0;
  }
  p++;
  while (p < end) {
    char c = *p++;
    if (c == '"') {
      return p == end;
    }
    if (c != '\\') {
      buf_put(out, &c, 1);
      continue;
    }
    if (p >= end) {
      return 0;
    }
    char e = *p++;
    switch (e) {
    case '"': buf_put(out, "\"", 1); break;
    case '\\': buf_put(out, "\\", 1); break;
    case '/': buf_put(out, "/", 1); break;
    case 'b': buf_put(out, "\b", 1); break;
    case 'f': buf_put(out, "\f", 1); break;
    case 'n': buf_put(out, "\n", 1); break;
    case 'r': buf_put(out, "\r", 1); break;
    case 't': buf_put(out, "\t", 1); break;
    case 'u': {
      uint32_t cp;
      if (!read_hex4(p, end, &cp)) {
        return 0;
      }
      p += 4;
      if (cp >= 0xD800 && cp < 0xDC00) {
        uint32_t lo;
        if (end - p >= 6 && p[0] == '\\' && p[1] == 'u' && read_hex4(p + 2, end, &lo) &&
            lo >= 0xDC00 && lo < 0xE000) {
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          p += 6;
        } else {
          cp = 0xFFFD; // lone high surrogate
        }
      } else if (cp >= 0xDC00 && cp < 0xE000) {
        cp = 0xFFFD; // lone low surrogate
      }
      put_utf8(out, cp);
      break;
    }
    default: return 0;
    }
  }
  return 0;
}

// ---------------------------------------------------------------------------
// Results.

static int64_t finish(buf *b) {
  if (b->failed) {
    free(b->data);
    static const char oom[] = "\1{\"code\":\"internal_error\",\"message\":\"out of memory\"}";
    last_output = NULL;
    return (int64_t)((uint64_t)(uintptr_t)oom << 32 | (sizeof oom - 1));
  }
  last_output = b->data;
  return (int64_t)((uint64_t)(uintptr_t)b->data << 32 | b->len);
}

static int64_t fail(const char *code, const char *message) {
  buf b = {0};
  buf_str(&b, "\1{\"code\":");
  buf_json_string(&b, code, strlen(code));
  buf_str(&b, ",\"message\":");
  buf_json_string(&b, message, strlen(message));
  buf_str(&b, "}");
  return finish(&b);
}

static int64_t tool_error(const char *message) {
  buf b = {0};
  buf_put(&b, "\0", 1);
  buf_str(&b, "{\"content\":");
  buf_json_string(&b, message, strlen(message));
  buf_str(&b, ",\"isError\":true}");
  return finish(&b);
}

static const char describe_json[] =
    "{\"name\":\"c-textstats\",\"version\":\"1.0.0\",\"kind\":\"tool\",\"tools\":[{"
    "\"name\":\"word_count\","
    "\"description\":\"Counts the words, lines, characters (Unicode code points) and bytes of a text.\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\","
    "\"description\":\"The text to measure.\"}},\"required\":[\"text\"],"
    "\"additionalProperties\":false},"
    "\"idempotent\":true}]}";

static int64_t describe(void) {
  buf b = {0};
  buf_put(&b, "\0", 1);
  buf_put(&b, describe_json, sizeof describe_json - 1);
  return finish(&b);
}

static int is_space(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static int64_t word_count(span args) {
  span text;
  int found = object_get(args, "text", &text);
  if (found < 0) {
    return tool_error("arguments must be a JSON object");
  }
  if (found == 0) {
    return tool_error("missing argument \"text\"");
  }
  buf t = {0};
  if (!decode_string(text, &t)) {
    free(t.data);
    return tool_error("argument \"text\" must be a string");
  }
  if (t.failed) {
    return fail("internal_error", "out of memory");
  }

  uint64_t words = 0, lines = 0, chars = 0;
  int in_word = 0;
  for (size_t i = 0; i < t.len; i++) {
    unsigned char c = (unsigned char)t.data[i];
    if ((c & 0xC0) != 0x80) {
      chars++; // not a UTF-8 continuation byte: a new code point
    }
    if (c == '\n') {
      lines++;
    }
    if (is_space(c)) {
      in_word = 0;
    } else if (!in_word) {
      in_word = 1;
      words++;
    }
  }
  if (t.len > 0 && t.data[t.len - 1] != '\n') {
    lines++; // a last line without a newline still counts
  }
  uint64_t bytes = t.len;
  free(t.data);

  buf b = {0};
  buf_put(&b, "\0", 1);
  buf_str(&b, "{\"content\":\"words: ");
  buf_uint(&b, words);
  buf_str(&b, ", lines: ");
  buf_uint(&b, lines);
  buf_str(&b, ", chars: ");
  buf_uint(&b, chars);
  buf_str(&b, ", bytes: ");
  buf_uint(&b, bytes);
  buf_str(&b, "\",\"data\":{\"words\":");
  buf_uint(&b, words);
  buf_str(&b, ",\"lines\":");
  buf_uint(&b, lines);
  buf_str(&b, ",\"chars\":");
  buf_uint(&b, chars);
  buf_str(&b, ",\"bytes\":");
  buf_uint(&b, bytes);
  buf_str(&b, "}}");

  buf line = {0};
  buf_str(&line, "word_count: ");
  buf_uint(&line, words);
  buf_str(&line, " words in ");
  buf_uint(&line, bytes);
  buf_str(&line, " bytes");
  if (!line.failed) {
    host_log(LOG_INFO, line.data, (int32_t)line.len);
  }
  free(line.data);
  return finish(&b);
}

static int64_t tool_call(span req) {
  span call, name, args;
  if (object_get(req, "call", &call) != 1) {
    return fail("bad_input", "tool call request has no \"call\" object");
  }
  if (object_get(call, "name", &name) != 1) {
    return fail("bad_input", "tool call has no \"name\"");
  }
  int has_args = object_get(call, "arguments", &args);
  if (has_args < 0) {
    return fail("bad_input", "tool call is not valid JSON");
  }
  static const char empty[] = "{}";
  if (has_args == 0 || (args.end - args.p == 4 && memcmp(args.p, "null", 4) == 0)) {
    args.p = empty;
    args.end = empty + 2;
  }
  if (key_equals(name.p, name.end, "word_count")) {
    return word_count(args);
  }
  buf msg = {0};
  buf_str(&msg, "unknown tool ");
  buf_put(&msg, name.p, (size_t)(name.end - name.p));
  buf_put(&msg, "", 1);
  int64_t r = fail("unknown_tool", msg.failed ? "unknown tool" : msg.data);
  free(msg.data);
  return r;
}

EXPORT("looopy_call") int64_t looopy_call(int32_t op, int32_t ptr, int32_t len) {
  free(last_output);
  last_output = NULL;
  span in = {(const char *)(uintptr_t)ptr, (const char *)(uintptr_t)ptr + len};
  int64_t r;
  if (len < 0) {
    r = fail("bad_input", "negative input length");
  } else if (op == OP_DESCRIBE) {
    r = describe();
  } else if (op == OP_TOOL_CALL) {
    r = tool_call(in);
  } else {
    r = fail("unsupported", "textstats is a tool plugin: only describe (0) and tool call (1)");
  }
  free_pending();
  return r;
}
