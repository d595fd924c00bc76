/* Two MPI_Allgatherv a step between two time-based spins of WORK microseconds (so a vCPU's speed does not matter):
 * what the collectives add to a step on their own (bench/RESULTS.md, "Parsing in the waits").
 * Build and run: mpicc -O2 bench/allreduce/two_gathers_per_step.c -o /tmp/two_gathers &&
 *   mpirun --bind-to core -np 2 /tmp/two_gathers FLOATS_PER_RANK WORK_US STEPS
 * Rank 0 prints the step time against 2 x WORK. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void spin(double s){double t=now();volatile double x=0;while(now()-t<s)x+=1;}
int main(int c,char**v){MPI_Init(&c,&v);int r,n;MPI_Comm_rank(MPI_COMM_WORLD,&r);MPI_Comm_size(MPI_COMM_WORLD,&n);
 int cnt=atoi(v[1]); double work=atof(v[2])*1e-6; int iters=atoi(v[3]);
 float*s=calloc(cnt,4),*a=calloc(cnt*n,4);int cs[64],ds[64];for(int i=0;i<n;i++){cs[i]=cnt;ds[i]=i*cnt;}
 double wait=0,t0=now();
 for(int i=0;i<iters;i++){spin(work);double a0=now();MPI_Allgatherv(s,cnt,MPI_FLOAT,a,cs,ds,MPI_FLOAT,MPI_COMM_WORLD);
  spin(work);MPI_Allgatherv(s,cnt,MPI_FLOAT,a,cs,ds,MPI_FLOAT,MPI_COMM_WORLD);wait+=now()-a0;}
 double T=now()-t0; if(r==0)printf("cnt %d work %.0fus: per iter %.1f us, expected work %.1f, collective+work2 %.1f\n",cnt,work*1e6,T/iters*1e6,2*work*1e6,wait/iters*1e6);
 MPI_Finalize();}
