#include "ringtrain/comm/shared_segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "ringtrain/comm/mpi_runtime.hpp"

namespace ringtrain::comm {

namespace {

constexpr size_t kNameBytes = 64;

std::string errno_text(const char* what, const char* name) {
    return std::string(what) + "(" + name + "): " + std::strerror(errno);
}

}  // namespace

std::unique_ptr<SharedSegment> SharedSegment::create(MPI_Comm node, size_t bytes, std::string* why) {
    int rank = 0, size = 1;
    check_mpi(MPI_Comm_rank(node, &rank), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(node, &size), "MPI_Comm_size");

    // Local rank 0 names and sizes the segment; the name travels with its success flag.
    char name[kNameBytes] = {};
    std::string error;
    int fd = -1;
    if (rank == 0) {
        static std::atomic<unsigned> serial{0};  // several segments per process each get their own name
        std::snprintf(name, sizeof name, "/ringtrain-%d-%u", static_cast<int>(getpid()), serial.fetch_add(1));
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0) {
            error = errno_text("shm_open", name);
        } else {
            // posix_fallocate reserves the pages now: a /dev/shm too small for the segment fails here, not as a
            // SIGBUS on first touch in the middle of training.
            const int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
            if (rc != 0) {
                errno = rc;
                error = errno_text("posix_fallocate", name) + " (" + std::to_string(bytes) +
                        " bytes; is /dev/shm full or small?)";
            }
        }
        if (!error.empty()) name[0] = '\0';
    }
    check_mpi(MPI_Bcast(name, static_cast<int>(kNameBytes), MPI_CHAR, 0, node), "MPI_Bcast");
    if (rank != 0 && name[0] != '\0') {
        fd = shm_open(name, O_RDWR, 0600);
        if (fd < 0) error = errno_text("shm_open", name);
    }
    void* base = MAP_FAILED;
    if (fd >= 0 && error.empty()) {
        base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (base == MAP_FAILED) error = errno_text("mmap", name);
    }
    if (fd >= 0) close(fd);  // the mapping keeps the segment alive
    if (error.empty() && name[0] == '\0') error = "local rank 0 could not create the shared-memory segment";

    int ok = error.empty() ? 1 : 0, all_ok = 0;
    check_mpi(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, node), "MPI_Allreduce");
    // Everyone has opened it (or given up): the name is no longer needed.
    if (rank == 0 && name[0] != '\0') shm_unlink(name);
    if (!all_ok) {
        if (base != MAP_FAILED) munmap(base, bytes);
        if (why) *why = error.empty() ? "another rank of this host could not map the shared-memory segment" : error;
        return nullptr;
    }
    return std::unique_ptr<SharedSegment>(new SharedSegment(base, bytes, rank, size));
}

std::unique_ptr<SharedSegment> SharedSegment::create_on_host(MPI_Comm parent, size_t bytes, std::string* why) {
    MPI_Comm node = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split_type(parent, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
    std::unique_ptr<SharedSegment> segment;
    try {
        segment = create(node, bytes, why);
    } catch (...) {
        MPI_Comm_free(&node);
        throw;
    }
    MPI_Comm_free(&node);
    return segment;
}

SharedSegment::~SharedSegment() {
    if (base_) munmap(base_, bytes_);
}

}  // namespace ringtrain::comm
