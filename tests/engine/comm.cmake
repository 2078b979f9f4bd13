# Communicator tests. test_comm_mpi has its own main (it owns MPI) and runs under mpirun with 1, 2
# and 4 ranks; it also covers SelfComm and, where GPUs exist, NcclComm.
add_executable(test_comm_mpi test_comm_mpi.cpp)
target_link_libraries(test_comm_mpi PRIVATE starzero_comm Catch2::Catch2)

foreach(ranks 1 2 4)
  add_test(NAME comm_mpi_np${ranks}
           COMMAND ${STARZERO_MPIRUN} -np ${ranks} $<TARGET_FILE:test_comm_mpi>)
  # A rank that fails while the others wait in a collective hangs the job: the timeout fails it.
  set_tests_properties(comm_mpi_np${ranks} PROPERTIES TIMEOUT 120 LABELS "comm;mpi")
endforeach()
