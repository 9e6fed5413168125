#!/usr/bin/env bash
# Per kernel of the built extension: instruction counts that matter when reading the SASS
# (FFMA/DFMA, shared loads, local-memory spills LDL/STL, barriers).
# Usage: bash benchmarks/debug/sass_summary.sh [pattern]
so=$(python -c 'import torchconv._C as c; print(c.__file__)')
cuobjdump -sass "$so" | awk -v pat="${1:-.}" '
  function report() {
    if (name == "" || name !~ pat) return
    short = name; if (match(name, /[a-z_]+_kernelI[fd][^ ]{0,40}/)) short = substr(name, RSTART, RLENGTH)
    printf "%-70s FMA %5d LDS %4d LDL %3d STL %3d BAR %3d\n", short, ffma, lds, ldl, stl, bar
  }
  /Function :/ { report(); name = $3; ffma = lds = ldl = stl = bar = 0; next }
  /FFMA|DFMA/ { ffma++ } /LDS/ { lds++ } /LDL/ { ldl++ } /STL/ { stl++ } /BAR/ { bar++ }
  END { report() }'
