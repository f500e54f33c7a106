;; trap: a hostile Looopy-ABI fixture. describe answers; its one tool misbehaves.
(module
  (memory (export "memory") 2)
  (data (i32.const 1024) "\00{\"kind\":\"tool\",\"tools\":[{\"name\":\"trap_wat\",\"description\":\"hostile fixture\"}]}")
  (func (export "looopy_abi_v1"))
  (func (export "looopy_alloc") (param i32) (result i32) (i32.const 65536))
  (func (export "looopy_call") (param $op i32) (param $p i32) (param $n i32) (result i64)
    (if (i32.eqz (local.get $op))
      (then (return (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 78)))))
    unreachable
  )
)
