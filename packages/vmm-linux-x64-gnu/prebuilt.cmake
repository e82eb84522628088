# Included right after project() in @gmlake/vmm's CMakeLists.txt (CMAKE_PROJECT_INCLUDE,
# set by build.mjs) for the prebuilt only: force-include glibc-compat.h in every source.
add_compile_options(-include ${CMAKE_CURRENT_LIST_DIR}/glibc-compat.h)
