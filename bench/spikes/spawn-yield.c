/* Spike for docs/benchmarks.md, "Towards a 50 ms move" (not built by cargo or CI): a 1-child
   MPI_Comm_spawn from N ranks, timed as in spawn-phases.c, with MPICH's
   MPIR_CVAR_ENABLE_HEAVY_YIELD written through MPI_T around the spawn on the parents only
   (argv[1] = 1) or not (0): do parents that spin in the spawn slow the child's MPI_Init?
   $MPICC -O2 -o y spawn-yield.c && mpiexec -n 4 ./y 1 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_REALTIME,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static MPI_T_cvar_handle handle; static int have_handle;
static void set_yield(int on){
  if(!have_handle) return;
  if(MPI_T_cvar_write(handle,&on)!=MPI_SUCCESS) fprintf(stderr,"cvar write failed\n");
}
int main(int argc,char**argv){
  double t_main=now();
  MPI_Comm parent; int provided;
  MPI_Init(&argc,&argv);
  double t_init=now();
  MPI_Comm_get_parent(&parent);
  if(parent!=MPI_COMM_NULL){
    double t_call=atof(argv[2]);
    double v[3]={t_call,t_main,t_init};
    MPI_Send(v,3,MPI_DOUBLE,0,0,parent);
    MPI_Comm_disconnect(&parent);
    MPI_Finalize();return 0;
  }
  int use=atoi(argv[1]);
  MPI_T_init_thread(MPI_THREAD_SINGLE,&provided);
  int index,count;
  if(MPI_T_cvar_get_index("MPIR_CVAR_ENABLE_HEAVY_YIELD",&index)==MPI_SUCCESS &&
     MPI_T_cvar_handle_alloc(index,NULL,&handle,&count)==MPI_SUCCESS) have_handle=1;
  int rank;MPI_Comm_rank(MPI_COMM_WORLD,&rank);
  if(rank==0) printf("cvar found: %d, yield around the spawn: %d\n",have_handle,use);
  for(int k=0;k<7;k++){
    char buf[64];double t0=now();snprintf(buf,64,"%.6f",t0);
    char*args[]={argv[1],buf,NULL};MPI_Comm child;
    if(use) set_yield(1);
    MPI_Comm_spawn(argv[0],args,1,MPI_INFO_NULL,0,MPI_COMM_WORLD,&child,MPI_ERRCODES_IGNORE);
    if(use) set_yield(0);
    double t1=now();
    if(rank==0){double v[3];MPI_Recv(v,3,MPI_DOUBLE,0,0,child,MPI_STATUS_IGNORE);
      printf("spawn %.1f ms: call->main %.1f, MPI_Init %.1f, init->return %.1f\n",(t1-t0)*1e3,(v[1]-v[0])*1e3,(v[2]-v[1])*1e3,(t1-v[2])*1e3);}
    MPI_Comm_disconnect(&child);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_T_finalize();
  MPI_Finalize();return 0;}
