;; wecho: the smallest useful Looopy-ABI tool, for measuring the host's own
;; cost: its one tool answers {"content":"echo","data":<the request>}.
(module
  (memory (export "memory") 2)
  (data (i32.const 1024) "\00{\"kind\":\"tool\",\"tools\":[{\"name\":\"wecho\",\"description\":\"Answers with its request as data.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\"}},\"required\":[\"text\"]}}]}")
  (data (i32.const 4096) "\00{\"content\":\"echo\",\"data\":")
  (data (i32.const 3072) "\01{\"code\":\"bad_input\",\"message\":\"input over 32 KiB\"}")
  (func (export "looopy_abi_v1"))
  (func (export "looopy_alloc") (param i32) (result i32) (i32.const 65536))
  (func (export "looopy_call") (param $op i32) (param $p i32) (param $n i32) (result i64)
    (if (i32.eqz (local.get $op))
      (then (return (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 184)))))
    (if (i32.gt_u (local.get $n) (i32.const 32768))
      (then (return (i64.or (i64.shl (i64.const 3072) (i64.const 32)) (i64.const 51)))))
    ;; status and prefix are at 4096; the request follows, then "}"
    (memory.copy (i32.const 4122) (local.get $p) (local.get $n))
    (i32.store8 (i32.add (i32.const 4122) (local.get $n)) (i32.const 125))
    (i64.or (i64.shl (i64.const 4096) (i64.const 32))
            (i64.extend_i32_u (i32.add (local.get $n) (i32.const 27))))
  )
)
