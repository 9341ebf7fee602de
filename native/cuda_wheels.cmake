# PYCUTLASS_RT_CUDA=pypi, included before project(): compile with the nvcc of PyPI's CUDA 13
# wheels (nvidia-cuda-nvcc, -crt, -runtime, -cccl, nvidia-nvvm): the tree pip install .
# fetched and unpacked (PYCUTLASS_RT_CUDA_WHEELS, native/build_backend.py), else the one
# installed in the build's Python. Either is one toolkit tree, nvidia/cu13, except that nvcc
# links from its lib64/ and CMake's FindCUDAToolkit wants a libcudart.so: a tree of links in
# the build directory adds both, at a path that stays put across builds.
set(PYCUTLASS_RT_CUDA_WHEELS "$ENV{PYCUTLASS_RT_CUDA_WHEELS}" CACHE PATH
    "PyPI's CUDA wheels unpacked (the directory nvidia/cu13); empty: the build's Python's")
set(PCR_CUDA_WHEELS "${PYCUTLASS_RT_CUDA_WHEELS}")
if(NOT PCR_CUDA_WHEELS)
  if(NOT Python3_EXECUTABLE)
    find_package(Python3 REQUIRED COMPONENTS Interpreter)
  endif()
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" -c "import os, sys
roots = (os.path.join(p, 'nvidia', 'cu13') for p in sys.path)
print(next(r for r in roots if os.path.isfile(os.path.join(r, 'bin', 'nvcc'))))"
    OUTPUT_VARIABLE PCR_CUDA_WHEELS OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
if(NOT EXISTS "${PCR_CUDA_WHEELS}/bin/nvcc")
  message(FATAL_ERROR "PYCUTLASS_RT_CUDA=pypi, but no CUDA wheels' tree (nvidia/cu13/bin/nvcc) "
                      "was given (PYCUTLASS_RT_CUDA_WHEELS) or is installed in the build's "
                      "Python: pip install . fetches the pinned ones (native/build_backend.py)")
endif()

set(PCR_CUDA_TREE "${CMAKE_BINARY_DIR}/cuda-pypi")
file(REMOVE_RECURSE "${PCR_CUDA_TREE}")  # links only: their targets stay
file(MAKE_DIRECTORY "${PCR_CUDA_TREE}/bin" "${PCR_CUDA_TREE}/lib64")
file(GLOB entries "${PCR_CUDA_WHEELS}/bin/*")  # nvcc looks for its tools and profile beside it
foreach(entry IN LISTS entries)
  get_filename_component(name "${entry}" NAME)
  file(CREATE_LINK "${entry}" "${PCR_CUDA_TREE}/bin/${name}" SYMBOLIC)
endforeach()
file(GLOB entries "${PCR_CUDA_WHEELS}/lib/*")
foreach(entry IN LISTS entries)
  get_filename_component(name "${entry}" NAME)
  file(CREATE_LINK "${entry}" "${PCR_CUDA_TREE}/lib64/${name}" SYMBOLIC)
  if(name MATCHES "^libcudart\\.so\\.[0-9]+$")
    file(CREATE_LINK "${name}" "${PCR_CUDA_TREE}/lib64/libcudart.so" SYMBOLIC)
  endif()
endforeach()
foreach(dir include nvvm)
  file(CREATE_LINK "${PCR_CUDA_WHEELS}/${dir}" "${PCR_CUDA_TREE}/${dir}" SYMBOLIC)
endforeach()

set(CMAKE_CUDA_COMPILER "${PCR_CUDA_TREE}/bin/nvcc")
set(CUDAToolkit_ROOT "${PCR_CUDA_TREE}")
