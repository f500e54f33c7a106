;; startspin: a hostile Looopy-ABI fixture whose start section never returns.
(module
  (memory (export "memory") 2)
  (func $spin (loop $l (br $l)))
  (start $spin)
  (func (export "looopy_abi_v1"))
  (func (export "looopy_alloc") (param i32) (result i32) (i32.const 65536))
  (func (export "looopy_call") (param i32 i32 i32) (result i64) (i64.const 0))
)
