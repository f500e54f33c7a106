;; noexports: a module that exports nothing a host can use.
(module
  (memory (export "memory") 1)
  (func (export "hello") (result i32) (i32.const 42))
)
