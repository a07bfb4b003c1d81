/* Spike for docs/benchmarks.md, "Towards a 50 ms move" (not built by cargo or CI): does a
   job survive the death of an idle standby? Rank 0 spawns one child over MPI_COMM_SELF (a
   standby, as in standby-join.c) and merges with it; the child writes its pid, then waits
   in a receive that never comes. The test kills it (kill -9 PID) while the job's ranks go
   on with an allreduce every 10 ms for argv[1] seconds; each rank prints whether it got
   to the end.
   $MPICC -O2 -o d standby-death.c && (mpiexec -n 2 ./d 6 &) ; sleep 2.5; kill -9 $(cat /tmp/standby.pid) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  MPI_Init(&argc,&argv);
  MPI_Comm parent; MPI_Comm_get_parent(&parent);
  if(parent!=MPI_COMM_NULL){
    MPI_Comm pair; MPI_Intercomm_merge(parent,1,&pair);
    FILE*f=fopen("/tmp/standby.pid","w"); fprintf(f,"%d\n",(int)getpid()); fclose(f);
    int x; MPI_Recv(&x,1,MPI_INT,0,99,pair,MPI_STATUS_IGNORE); /* never sent */
    MPI_Finalize(); return 0;
  }
  int rank; MPI_Comm_rank(MPI_COMM_WORLD,&rank);
  double seconds = argc>1 ? atof(argv[1]) : 6;
  MPI_Comm sb_inter=MPI_COMM_NULL, sb_pair=MPI_COMM_NULL;
  if(rank==0){
    MPI_Comm_spawn(argv[0],MPI_ARGV_NULL,1,MPI_INFO_NULL,0,MPI_COMM_SELF,&sb_inter,MPI_ERRCODES_IGNORE);
    MPI_Intercomm_merge(sb_inter,0,&sb_pair);
    MPI_Comm_set_errhandler(sb_pair,MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(sb_inter,MPI_ERRORS_RETURN);
  }
  double t0=now(); long it=0;
  while(now()-t0<seconds){
    double a=1,b; MPI_Allreduce(&a,&b,1,MPI_DOUBLE,MPI_SUM,MPI_COMM_WORLD);
    usleep(10000); it++;
  }
  printf("rank %d reached the end after %ld iterations (%.1f s)\n",rank,it,now()-t0);
  fflush(stdout);
  MPI_Finalize(); return 0;
}
