# Debian 12 packages: libfmt-dev, libopenblas-dev, libtbb-dev, llvm-19-dev (scripts/install-deps.sh).
find_package(fmt REQUIRED)
find_package(Threads REQUIRED)
# oneTBB: compiled code's thread pool (libtbb-dev).
find_package(TBB REQUIRED)

find_path(REEL_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas)
find_library(REEL_CBLAS_LIBRARY NAMES openblas cblas)
if(NOT REEL_CBLAS_INCLUDE_DIR OR NOT REEL_CBLAS_LIBRARY)
  message(FATAL_ERROR "Reel needs CBLAS (Debian: apt-get install libopenblas-dev)")
endif()
