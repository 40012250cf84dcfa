// codegen arrives with the JIT issue.
