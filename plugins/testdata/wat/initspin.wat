;; initspin: a hostile Looopy-ABI fixture whose _initialize never returns.
(module
  (memory (export "memory") 2)
  (func (export "looopy_abi_v1"))
  (func (export "_initialize") (loop $l (br $l)))
  (func (export "looopy_alloc") (param i32) (result i32) (i32.const 65536))
  (func (export "looopy_call") (param i32 i32 i32) (result i64) (i64.const 0))
)
