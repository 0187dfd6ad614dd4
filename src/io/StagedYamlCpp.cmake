# yaml-cpp staged by scripts/stage-deps.sh comes as headers and libyaml-cpp.a without CMake
# package files: make the imported target the package would have made.
if(NOT yaml-cpp_FOUND)
  find_path(SHIFTSTACK_YAML_CPP_INCLUDE yaml-cpp/yaml.h)
  find_library(SHIFTSTACK_YAML_CPP_LIBRARY NAMES libyaml-cpp.a yaml-cpp)
  if(SHIFTSTACK_YAML_CPP_INCLUDE AND SHIFTSTACK_YAML_CPP_LIBRARY AND NOT TARGET yaml-cpp)
    add_library(yaml-cpp UNKNOWN IMPORTED)
    set_target_properties(yaml-cpp PROPERTIES
      IMPORTED_LOCATION "${SHIFTSTACK_YAML_CPP_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${SHIFTSTACK_YAML_CPP_INCLUDE}")
    set(yaml-cpp_FOUND ON)
  endif()
endif()
