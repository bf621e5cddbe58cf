-- `fhelium --info`: build options, CUDA availability, devices.
return function(line_editing)
  local fh = require "fhelium"
  local info = fh.info()
  print(("fhelium %s"):format(info.version))
  print(("  build type:      %s%s"):format(info.build_type or "?", info.sanitize and " (ASan+UBSan)" or ""))
  print(("  CUDA backend:    %s"):format(info.built_with_cuda and "compiled" or "not compiled (CPU-only build)"))
  print(("  REPL editing:    %s"):format(line_editing or "?"))
  print(("  LuaJIT:          %s"):format(jit and jit.version or _VERSION))
  if fh.cuda.is_available() then
    print(("  CUDA devices:    %d"):format(fh.cuda.device_count()))
    for i = 0, fh.cuda.device_count() - 1 do
      local p = fh.cuda.get_device_properties(i)
      print(("    cuda:%d  %s, %.1f GiB, sm_%d%d, %d SMs"):format(i, p.name, p.total_memory / 2 ^ 30, p.major,
        p.minor, p.multi_processor_count))
    end
  else
    print(("  CUDA available:  no (%s)"):format(info.cuda_unavailable_reason))
  end
end
