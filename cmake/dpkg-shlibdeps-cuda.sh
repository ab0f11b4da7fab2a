#!/bin/sh
# dpkg-shlibdeps for a package built with the CUDA backend: NVIDIA's libraries (no Debian package
# declares them) are left out of Depends instead of failing (cmake/cpack_project.cmake.in).
exec dpkg-shlibdeps --ignore-missing-info "$@"
