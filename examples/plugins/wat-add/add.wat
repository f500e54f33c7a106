;; add: a Looopy tool plugin written by hand in WebAssembly text format.
;;
;; It implements the Looopy ABI (docs/PLUGIN_ABI.md) with no runtime at all:
;; exports memory, looopy_abi_v1, looopy_alloc and looopy_call; imports nothing.
;;
;; Tool add: {"a": 2, "b": 40} -> {"content":"42","data":{"sum":42}}.
;;
;; Memory layout:
;;   16 .. 800     static answers (data segments below)
;;   1024 .. 1152  the output of a tool call
;;   1536 .. 1568  scratch for formatting a number
;;   65536 ..      the heap of looopy_alloc: a bump allocator reset after each call
;;
;; The request scanner walks the JSON once, skipping string contents (with
;; their escapes), and looks at the value after each member name that matters:
;; "name" (must be "add"), "a" and "b" (integers). The tool's schema, which the
;; host enforces before calling, forbids other members in the arguments.
(module
  (memory (export "memory") 2)

  (global $heap (mut i32) (i32.const 65536))
  (global $num (mut i64) (i64.const 0))

  ;; describe, status byte 0 included: offset 16, length 365
  (data (i32.const 16) "\00{\"name\":\"wat-add\",\"version\":\"1.0.0\",\"kind\":\"tool\",\"tools\":[{\"name\":\"add\",\"description\":\"Adds two integers (at most 15 digits each).\",\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"description\":\"The first addend.\"},\"b\":{\"type\":\"integer\",\"description\":\"The second addend.\"}},\"required\":[\"a\",\"b\"],\"additionalProperties\":false},\"idempotent\":true}]}")
  ;; unsupported op: offset 384, length 97
  (data (i32.const 384) "\01{\"code\":\"unsupported\",\"message\":\"wat-add is a tool plugin: only describe (0) and tool call (1)\"}")
  ;; unknown tool: offset 496, length 62
  (data (i32.const 496) "\01{\"code\":\"unknown_tool\",\"message\":\"wat-add has one tool: add\"}")
  ;; malformed request: offset 560, length 91
  (data (i32.const 560) "\01{\"code\":\"bad_input\",\"message\":\"tool call request is not valid JSON (unterminated string)\"}")
  ;; bad arguments (a tool result the model can act on): offset 656, length 85
  (data (i32.const 656) "\00{\"content\":\"arguments a and b must be integers of at most 15 digits\",\"isError\":true}")
  ;; pieces of the answer: offsets 752 (13), 768 (16), 784 (2)
  (data (i32.const 752) "\00{\"content\":\"")
  (data (i32.const 768) "\",\"data\":{\"sum\":")
  (data (i32.const 784) "}}")

  (func (export "looopy_abi_v1"))

  ;; looopy_alloc hands out 8-byte aligned blocks of the heap, growing the
  ;; memory when needed; 0 when size is negative or memory cannot grow.
  (func (export "looopy_alloc") (param $size i32) (result i32)
    (local $p i32)
    (local $end i32)
    (if (i32.or (i32.lt_s (local.get $size) (i32.const 0))
                (i32.gt_u (local.get $size) (i32.const 0x40000000)))
      (then (return (i32.const 0))))
    (local.set $p (global.get $heap))
    (local.set $end (i32.add (local.get $p)
                             (i32.and (i32.add (local.get $size) (i32.const 7)) (i32.const -8))))
    (if (i32.gt_u (local.get $end) (i32.shl (memory.size) (i32.const 16)))
      (then
        (if (i32.eq (memory.grow
                      (i32.shr_u
                        (i32.add (i32.sub (local.get $end) (i32.shl (memory.size) (i32.const 16)))
                                 (i32.const 65535))
                        (i32.const 16)))
                    (i32.const -1))
          (then (return (i32.const 0))))))
    (global.set $heap (local.get $end))
    (local.get $p))

  (func $pack (param $ptr i32) (param $len i32) (result i64)
    (i64.or (i64.shl (i64.extend_i32_u (local.get $ptr)) (i64.const 32))
            (i64.extend_i32_u (local.get $len))))

  (func (export "looopy_call") (param $op i32) (param $ptr i32) (param $len i32) (result i64)
    (local $r i64)
    (if (i32.eqz (local.get $op))
      (then (local.set $r (call $pack (i32.const 16) (i32.const 365))))
      (else
        (if (i32.and (i32.eq (local.get $op) (i32.const 1))
                     (i32.ge_s (local.get $len) (i32.const 0)))
          (then (local.set $r (call $add (local.get $ptr)
                                         (i32.add (local.get $ptr) (local.get $len)))))
          (else (local.set $r (call $pack (i32.const 384) (i32.const 97)))))))
    ;; Inputs live until the end of the call: the heap starts over.
    (global.set $heap (i32.const 65536))
    (local.get $r))

  (func $skip_ws (param $i i32) (param $end i32) (result i32)
    (local $c i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $end)))
        (local.set $c (i32.load8_u (local.get $i)))
        (br_if $done (i32.eqz
          (i32.or (i32.or (i32.eq (local.get $c) (i32.const 0x20)) (i32.eq (local.get $c) (i32.const 0x09)))
                  (i32.or (i32.eq (local.get $c) (i32.const 0x0a)) (i32.eq (local.get $c) (i32.const 0x0d))))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (local.get $i))

  ;; $skip_string: $i is just past an opening quote; returns the index just
  ;; past the closing quote, or -1 when the string does not end.
  (func $skip_string (param $i i32) (param $end i32) (result i32)
    (local $c i32)
    (loop $next
      (if (i32.ge_u (local.get $i) (local.get $end)) (then (return (i32.const -1))))
      (local.set $c (i32.load8_u (local.get $i)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (if (i32.eq (local.get $c) (i32.const 0x22)) (then (return (local.get $i))))
      (if (i32.eq (local.get $c) (i32.const 0x5c))
        (then (local.set $i (i32.add (local.get $i) (i32.const 1)))))
      (br $next))
    (i32.const -1))

  ;; $parse_int reads an integer of 1 to 15 digits at $i into $num; returns 1
  ;; on success, 0 when the value is not such an integer.
  (func $parse_int (param $i i32) (param $end i32) (result i32)
    (local $neg i32)
    (local $n i32)
    (local $c i32)
    (local $v i64)
    (if (i32.and (i32.lt_u (local.get $i) (local.get $end))
                 (i32.eq (i32.load8_u (local.get $i)) (i32.const 0x2d)))
      (then
        (local.set $neg (i32.const 1))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))))
    (block $done
      (loop $digit
        (br_if $done (i32.ge_u (local.get $i) (local.get $end)))
        (local.set $c (i32.sub (i32.load8_u (local.get $i)) (i32.const 0x30)))
        (br_if $done (i32.gt_u (local.get $c) (i32.const 9)))
        (local.set $v (i64.add (i64.mul (local.get $v) (i64.const 10)) (i64.extend_i32_u (local.get $c))))
        (local.set $n (i32.add (local.get $n) (i32.const 1)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $digit)))
    (if (i32.or (i32.eqz (local.get $n)) (i32.gt_u (local.get $n) (i32.const 15)))
      (then (return (i32.const 0))))
    ;; A fraction or an exponent is not an integer.
    (if (i32.lt_u (local.get $i) (local.get $end))
      (then
        (local.set $c (i32.load8_u (local.get $i)))
        (if (i32.or (i32.eq (local.get $c) (i32.const 0x2e))
                    (i32.eq (i32.or (local.get $c) (i32.const 0x20)) (i32.const 0x65)))
          (then (return (i32.const 0))))))
    (global.set $num (select (i64.sub (i64.const 0) (local.get $v)) (local.get $v) (local.get $neg)))
    (i32.const 1))

  ;; $add scans the request in [$i, $end) and answers the call.
  (func $add (param $i i32) (param $end i32) (result i64)
    (local $c i32)
    (local $key i32)
    (local $keylen i32)
    (local $j i32)
    (local $name_ok i32)
    (local $seen i32) ;; bit 0: a, bit 1: b
    (local $bad i32)
    (local $a i64)
    (local $b i64)
    (block $scanned
      (loop $next
        (br_if $scanned (i32.ge_u (local.get $i) (local.get $end)))
        (local.set $c (i32.load8_u (local.get $i)))
        (if (i32.ne (local.get $c) (i32.const 0x22))
          (then
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $next)))
        ;; A string: a member name when a ':' follows it.
        (local.set $key (i32.add (local.get $i) (i32.const 1)))
        (local.set $i (call $skip_string (local.get $key) (local.get $end)))
        (if (i32.eq (local.get $i) (i32.const -1))
          (then (return (call $pack (i32.const 560) (i32.const 91)))))
        (local.set $keylen (i32.sub (i32.sub (local.get $i) (i32.const 1)) (local.get $key)))
        (local.set $j (call $skip_ws (local.get $i) (local.get $end)))
        (br_if $next (i32.ge_u (local.get $j) (local.get $end)))
        (br_if $next (i32.ne (i32.load8_u (local.get $j)) (i32.const 0x3a)))
        (local.set $j (call $skip_ws (i32.add (local.get $j) (i32.const 1)) (local.get $end)))
        ;; "name": "add"
        (if (i32.and (i32.eq (local.get $keylen) (i32.const 4))
                     (i32.eq (i32.load (local.get $key)) (i32.const 0x656d616e)))
          (then
            (if (i32.le_u (i32.add (local.get $j) (i32.const 5)) (local.get $end))
              (then
                (if (i32.and
                      (i32.eq (i32.load (local.get $j)) (i32.const 0x64646122)) ;; "add
                      (i32.eq (i32.load8_u (i32.add (local.get $j) (i32.const 4))) (i32.const 0x22)))
                  (then (local.set $name_ok (i32.const 1))))))))
        ;; "a" or "b": an integer
        (if (i32.eq (local.get $keylen) (i32.const 1))
          (then
            (local.set $c (i32.load8_u (local.get $key)))
            (if (i32.eq (local.get $c) (i32.const 0x61))
              (then
                (if (call $parse_int (local.get $j) (local.get $end))
                  (then
                    (local.set $a (global.get $num))
                    (local.set $seen (i32.or (local.get $seen) (i32.const 1))))
                  (else (local.set $bad (i32.const 1))))))
            (if (i32.eq (local.get $c) (i32.const 0x62))
              (then
                (if (call $parse_int (local.get $j) (local.get $end))
                  (then
                    (local.set $b (global.get $num))
                    (local.set $seen (i32.or (local.get $seen) (i32.const 2))))
                  (else (local.set $bad (i32.const 1))))))))
        (local.set $i (local.get $j))
        (br $next)))
    (if (i32.eqz (local.get $name_ok))
      (then (return (call $pack (i32.const 496) (i32.const 62)))))
    (if (i32.or (local.get $bad) (i32.ne (local.get $seen) (i32.const 3)))
      (then (return (call $pack (i32.const 656) (i32.const 85)))))
    (call $answer (i64.add (local.get $a) (local.get $b))))

  ;; $answer writes {"content":"<sum>","data":{"sum":<sum>}} after status 0.
  (func $answer (param $sum i64) (result i64)
    (local $digits i32) ;; start of the number's text in the scratch area
    (local $n i32)      ;; its length
    (local $v i64)
    (local $out i32)
    ;; The number, written backwards from the end of the scratch area.
    (local.set $v (select (i64.sub (i64.const 0) (local.get $sum)) (local.get $sum)
                          (i64.lt_s (local.get $sum) (i64.const 0))))
    (local.set $digits (i32.const 1568))
    (loop $digit
      (local.set $digits (i32.sub (local.get $digits) (i32.const 1)))
      (i32.store8 (local.get $digits)
                  (i32.add (i32.const 0x30) (i32.wrap_i64 (i64.rem_u (local.get $v) (i64.const 10)))))
      (local.set $v (i64.div_u (local.get $v) (i64.const 10)))
      (br_if $digit (i64.ne (local.get $v) (i64.const 0))))
    (if (i64.lt_s (local.get $sum) (i64.const 0))
      (then
        (local.set $digits (i32.sub (local.get $digits) (i32.const 1)))
        (i32.store8 (local.get $digits) (i32.const 0x2d))))
    (local.set $n (i32.sub (i32.const 1568) (local.get $digits)))
    ;; prefix, number, middle, number, suffix
    (local.set $out (i32.const 1024))
    (memory.copy (local.get $out) (i32.const 752) (i32.const 13))
    (local.set $out (i32.add (local.get $out) (i32.const 13)))
    (memory.copy (local.get $out) (local.get $digits) (local.get $n))
    (local.set $out (i32.add (local.get $out) (local.get $n)))
    (memory.copy (local.get $out) (i32.const 768) (i32.const 16))
    (local.set $out (i32.add (local.get $out) (i32.const 16)))
    (memory.copy (local.get $out) (local.get $digits) (local.get $n))
    (local.set $out (i32.add (local.get $out) (local.get $n)))
    (memory.copy (local.get $out) (i32.const 784) (i32.const 2))
    (local.set $out (i32.add (local.get $out) (i32.const 2)))
    (call $pack (i32.const 1024) (i32.sub (local.get $out) (i32.const 1024))))
)
