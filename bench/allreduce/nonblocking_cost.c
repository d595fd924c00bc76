/* What a blocking and a non-blocking MPI collective cost when every rank arrives at once (bench/RESULTS.md,
 * "Parsing in the waits"): MPI_Allgatherv vs MPI_Iallgatherv + MPI_Test, MPI_Allreduce vs MPI_Iallreduce of 4 doubles.
 * Build and run: mpicc -O2 bench/allreduce/nonblocking_cost.c -o /tmp/nonblocking_cost &&
 *   mpirun --bind-to core -np 2 /tmp/nonblocking_cost FLOATS_PER_RANK CALLS MODE
 * MODE 0 allgatherv, 1 iallgatherv + test, 2 allreduce (4 doubles), 3 iallreduce + test. Rank 0 prints. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int c,char**v){MPI_Init(&c,&v);int r,n;MPI_Comm_rank(MPI_COMM_WORLD,&r);MPI_Comm_size(MPI_COMM_WORLD,&n);
 int cnt=atoi(v[1]); int iters=atoi(v[2]); int mode=atoi(v[3]);
 float*s=calloc(cnt,4),*a=calloc(cnt*n,4);int cs[64],ds[64];for(int i=0;i<n;i++){cs[i]=cnt;ds[i]=i*cnt;}
 double d[4]={1,2,3,4};
 MPI_Barrier(MPI_COMM_WORLD);
 double t0=now(); long tests=0;
 for(int i=0;i<iters;i++){
  if(mode==0){MPI_Allgatherv(s,cnt,MPI_FLOAT,a,cs,ds,MPI_FLOAT,MPI_COMM_WORLD);}
  else if(mode==1){MPI_Request q;MPI_Iallgatherv(s,cnt,MPI_FLOAT,a,cs,ds,MPI_FLOAT,MPI_COMM_WORLD,&q);int done=0;while(!done){MPI_Test(&q,&done,MPI_STATUS_IGNORE);tests++;}}
  else if(mode==2){MPI_Allreduce(MPI_IN_PLACE,d,4,MPI_DOUBLE,MPI_SUM,MPI_COMM_WORLD);}
  else {MPI_Request q;MPI_Iallreduce(MPI_IN_PLACE,d,4,MPI_DOUBLE,MPI_SUM,MPI_COMM_WORLD,&q);int done=0;while(!done){MPI_Test(&q,&done,MPI_STATUS_IGNORE);tests++;}}
 }
 double T=now()-t0; if(r==0)printf("mode %d cnt %d: %.2f us per call, %.1f tests per call\n",mode,cnt,T/iters*1e6,(double)tests/iters);
 MPI_Finalize();}
