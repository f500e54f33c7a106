;; describespin: a hostile Looopy-ABI fixture whose describe never answers.
(module
  (memory (export "memory") 2)
  (func (export "looopy_abi_v1"))
  (func (export "looopy_alloc") (param i32) (result i32) (i32.const 65536))
  (func (export "looopy_call") (param i32 i32 i32) (result i64)
    (loop $l (br $l))
    (i64.const 0))
)
